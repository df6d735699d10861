"""Parameters that get no gradient in a step (issue 42, items 1 and 4): one never used, one
used in the first steps only, a frozen one, a zero-size one, sizes that do not divide, uneven
local batches. Every hand-written stage, with SGD, momentum, Adam and AdamW (weight decay on),
leaves such a parameter alone as torch's optimizer on one process does, at world sizes 1-4,
as torch's DDP (find_unused_parameters=True) and FSDP2 do too; and zero_grad() discards a
step's gradients, those reduced during backward included."""

import pytest
import torch

from companion.runtime import launch

from .workers import AWKWARD_OPTIMIZERS, STAGES, awkward_one_process, awkward_worker

pytestmark = pytest.mark.ch9


@pytest.fixture(scope="module")
def awkward():
    return {n: launch(awkward_worker, n, backend="gloo", timeout=300) for n in (1, 2, 3, 4)}


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", list(AWKWARD_OPTIMIZERS))
@pytest.mark.parametrize("method", STAGES)
def test_a_parameter_without_a_gradient_is_left_alone_as_by_torch(
    awkward, world_size, optimizer, method
):
    expected = awkward_one_process(optimizer)
    for rank, out in enumerate(awkward[world_size]):
        trained, _, _ = out[method, optimizer]
        torch.testing.assert_close(
            trained,
            expected,
            rtol=1e-9,
            atol=1e-12,
            msg=lambda m: f"{method}, {optimizer}, rank {rank}: {m}",
        )


def test_the_check_can_fail_weight_decay_would_move_the_unused_parameters():
    """Were `never` and `early` stepped with zero gradients, weight decay would move them."""
    from .workers import Awkward

    net = Awkward()
    never_before = net.never.detach().clone()
    for optimizer in AWKWARD_OPTIMIZERS:
        trained = awkward_one_process(optimizer)
        assert torch.equal(trained[:5], never_before)  # `never` comes first and stays
        cls, hp = AWKWARD_OPTIMIZERS[optimizer]
        p = torch.nn.Parameter(never_before.clone())
        opt = cls([p], **hp)
        p.grad = torch.zeros_like(p)
        opt.step()
        assert not torch.equal(p.detach(), never_before), optimizer


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", STAGES)
def test_zero_grad_discards_the_step_s_gradients(awkward, world_size, method):
    for out in awkward[world_size]:
        for optimizer in AWKWARD_OPTIMIZERS:
            trained, after_empty_step, after_discarded = out[method, optimizer]
            assert torch.equal(after_empty_step, trained), (optimizer, "step, zero_grad, step")
            assert torch.equal(after_discarded, trained), (optimizer, "backward, zero_grad, step")


def test_reading_checkpointing_and_resharding_a_zero3_model_is_safe(tmp_path):
    """Issue 42 items 2 and 3: no SIGSEGV, no unusable file, a clear word instead."""
    from companion.runtime import launch

    from .workers import reading_after_zero3

    for seen in launch(reading_after_zero3, 2, str(tmp_path), backend="gloo", timeout=240):
        assert seen["sum"].startswith(
            "FreedParameterRead: Zero3Linear.weight is sharded by "
            "ZeRO-3: between steps each rank holds only its shard"
        )
        assert "optimizer.full_parameters() on every rank" in seen["sum"]
        assert seen["is a Linear"]
        assert tuple(seen["whole"]) == (4, 5)
        for name in ("state_dict", "save_checkpoint"):
            assert seen[name].startswith("Zero3: between steps each rank holds only its shard")
            assert "full_parameters()" in seen[name]
        assert not seen["file written"]
        assert seen["shard again"].startswith("Zero3: this model is already sharded by Zero3")
        assert seen["fsdp2 save_checkpoint"].startswith(
            "save_checkpoint: this model's parameters are sharded by FSDP2"
        )
