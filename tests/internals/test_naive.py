"""Step 1, all-reduce after backward: equals one process on the global batch (1, 2, 4 ranks,
even and uneven shares); frozen and tied parameters; no_sync; a clear error without a group."""

import pytest
import torch
import torch.distributed as dist

from companion.internals import (
    BucketedDDP,
    HookedDDP,
    NaiveDDP,
    can_finish_in_backward,
    trainable_parameters,
)
from companion.runtime import unwrap

from .workers import MICRO, STEPS, assert_replicas_equal_reference, assert_same, quirky, reference

pytestmark = pytest.mark.ch6


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("uneven", [False, True])
def test_naive_equals_one_process_on_the_global_batch(runs, world_size, uneven):
    batches, results = runs
    assert_replicas_equal_reference(
        results[world_size], ("NaiveDDP", uneven), reference(batches, unused=False)
    )


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("uneven", [False, True])
@pytest.mark.parametrize("variant", ["NaiveDDP", "HookedDDP", "BucketedDDP"])
def test_the_explicit_finish_fallback_trains_the_same(runs, world_size, uneven, variant):
    """finish_in_backward=False: the loop calls finish() (a second call does nothing)."""
    batches, results = runs
    want = reference(batches, unused=variant == "BucketedDDP")
    assert_replicas_equal_reference(results[world_size], (variant, "explicit", uneven), want)


@pytest.mark.parametrize("variant", ["NaiveDDP", "HookedDDP", "BucketedDDP"])
@pytest.mark.parametrize("explicit", [False, True])
def test_an_unused_parameter_is_named_at_the_next_forward_or_in_an_explicit_finish(
    runs, variant, explicit
):
    """As torch's DDP: the step cannot complete, and the next forward pass says why."""
    for out in runs[1][2]:
        message = out["errors"][variant, explicit]
        assert message.startswith(f"{variant}: parameter(s) unused got no gradient"), message
        assert "requires_grad_(False)" in message and "find_unused_parameters=True" in message


def test_finish_is_queued_on_the_autograd_engine_of_this_torch():
    assert can_finish_in_backward()  # else the wrappers would need finish() by hand


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_naive_accumulation_communicates_once_per_tensor_per_step(runs, world_size):
    batches, results = runs
    tensors = len(trainable_parameters(quirky(False)))
    for out in results[world_size]:
        params, allreduces, _ = out["accumulation"]["NaiveDDP", True]
        assert_same(params, reference(batches, unused=False)[1])
        assert allreduces == STEPS * tensors  # not STEPS * MICRO * tensors
    assert MICRO > 1


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("no_sync", [True, False])
@pytest.mark.parametrize("variant", ["NaiveDDP", "HookedDDP", "BucketedDDP"])
def test_accumulation_step_drives_the_explicit_finish_fallback(runs, world_size, no_sync, variant):
    """Issue 42 item 7: with finish_in_backward=False, accumulation_step calls finish()."""
    batches, results = runs
    for out in results[world_size]:
        assert_same(
            out["accumulation"][variant, no_sync, "explicit"], reference(batches, unused=False)[1]
        )


def test_trainable_parameters_leave_out_frozen_ones_and_count_tied_ones_once():
    names = [name for name, _ in trainable_parameters(quirky())]
    assert names == [
        "unused",
        "embed.weight",
        "embed.bias",
        "body.weight",
        "body.bias",
        "out.weight",
        "out.bias",
    ]  # no frozen.*, no head.weight (it is body.weight)


def test_wrapping_without_a_process_group_says_how_to_get_one():
    with pytest.raises(RuntimeError, match="process group.*launch"):
        NaiveDDP(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError):
        NaiveDDP("not a model")


class DictNet(torch.nn.Module):
    """A model whose forward takes a dict batch (as some real models do)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, batch):
        return self.fc(batch["x"])


def misuse(rank: int, world_size: int) -> dict:
    """Worker: what each variant says to a dict batch with weigh_by_samples and to a skipped finish()."""
    from companion.internals import BucketedDDP, HookedDDP

    seen = {}
    for cls in (NaiveDDP, HookedDDP, BucketedDDP):
        torch.manual_seed(0)
        net = cls(DictNet(), weigh_by_samples=True)
        try:
            net({"x": torch.ones(4, 3)})
            seen[cls.__name__, "dict"] = "accepted"
        except TypeError as err:
            seen[cls.__name__, "dict"] = str(err)
        for explicit in (True, False):  # the fallback, then the drop-in that finishes by itself
            net = cls(torch.nn.Linear(3, 2), finish_in_backward=not explicit)
            net(torch.ones(4, 3)).sum().backward()
            net.finish()  # a proper step (a second finish() does nothing) ...
            with torch.no_grad():
                net(torch.ones(2, 3))  # ... an evaluation in between is fine
            net(torch.ones(4, 3)).sum().backward()  # a step without a call to finish() ...
            try:
                net(torch.ones(4, 3))  # ... is refused at the next forward pass in the fallback
                seen[cls.__name__, "finish", explicit] = "accepted"
            except RuntimeError as err:
                seen[cls.__name__, "finish", explicit] = str(err)
    return seen


def test_a_dict_batch_with_weigh_by_samples_and_a_skipped_finish_are_refused():
    from companion.runtime import launch

    for seen in launch(misuse, 2, backend="gloo", timeout=180):
        for name in ("NaiveDDP", "HookedDDP", "BucketedDDP"):
            assert seen[name, "dict"].startswith(
                "weigh_by_samples counts the samples of forward's first argument"
            )
            assert (
                "got dict: pass the input tensor first, or weigh_by_samples=False"
                in seen[name, "dict"]
            )
            assert seen[name, "finish", True].startswith(
                f"{name}: a forward pass began a new step before finish()"
            )
            assert seen[name, "finish", False] == "accepted"  # backward's end called finish()


def test_unwrap_sees_through_each_rebuilt_ddp_as_through_torch_s():
    # Chapter 5's loop evaluates unwrap(net), and checkpoints save unwrap(net)'s state.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for cls in (NaiveDDP, HookedDDP, BucketedDDP):
            model = torch.nn.Linear(2, 2)
            assert unwrap(cls(model)) is model, cls.__name__
    finally:
        dist.destroy_process_group()
