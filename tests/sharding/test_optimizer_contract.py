"""The hand-written stages are torch optimizers (issue 37, item 2): torch's schedulers drive
them (warm-up, then StepLR) exactly as they drive one process's optimizer, step(closure)
evaluates the closure, and state_dict() / load_state_dict() resume a run mid-way on the same
world size, in float64, at world sizes 1-4 with uneven local shares."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding import Zero1, Zero2, Zero3
from companion.sharding.verify import OPTIMIZERS, global_batches, one_process

from .workers import optimizer_contract_worker, scheduled_one_process

pytestmark = pytest.mark.ch9


@pytest.fixture(scope="module")
def runs():
    return {
        n: launch(optimizer_contract_worker, n, backend="gloo", timeout=300) for n in (1, 2, 3, 4)
    }


def test_the_stages_are_optimizers():
    assert all(issubclass(cls, torch.optim.Optimizer) for cls in (Zero1, Zero2, Zero3))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_torch_s_schedulers_drive_every_stage_as_one_process(runs, world_size, optimizer):
    expected = scheduled_one_process(optimizer)
    assert not torch.allclose(
        expected, one_process(global_batches(5), optimizer)
    )  # the schedule mattered
    for rank, out in enumerate(runs[world_size]):
        for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
            torch.testing.assert_close(
                out[method, optimizer, "scheduled"],
                expected,
                rtol=1e-9,
                atol=1e-12,
                msg=lambda m: f"{method}, rank {rank}: {m}",
            )


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_state_dict_resumes_a_run_as_if_it_never_stopped(runs, world_size, optimizer):
    expected = one_process(global_batches(5), optimizer)
    for rank, out in enumerate(runs[world_size]):
        for method in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
            torch.testing.assert_close(
                out[method, optimizer, "resumed"],
                expected,
                rtol=1e-9,
                atol=1e-12,
                msg=lambda m: f"{method}, rank {rank}: {m}",
            )


def _plain_state(optimizer, steps=3):
    """One process's optimizer state after ``steps`` steps, and its parameters then."""
    from companion.sharding.training import full_parameters
    from companion.sharding.verify import _model

    net = _model()
    cls, hp = OPTIMIZERS[optimizer]
    opt = cls([p for p in net.parameters() if p.requires_grad], **hp)
    torch.optim.lr_scheduler.StepLR(opt, 100)  # adds initial_lr to the groups, changes no lr
    for X, y in global_batches(5)[:steps]:
        torch.nn.functional.cross_entropy(net(X), y).backward()
        opt.step()
        opt.zero_grad()
    return opt.state_dict(), full_parameters(net, opt)


@pytest.fixture(scope="module")
def whole_runs():
    from .workers import whole_state_worker

    plain = {name: _plain_state(name) for name in OPTIMIZERS}
    return plain, {n: launch(whole_state_worker, n, plain, timeout=300) for n in (1, 2, 4)}


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", ["ZeRO-1", "ZeRO-2", "ZeRO-3"])
def test_state_dict_is_the_whole_state_and_resumes_at_any_world_size(
    whole_runs, world_size, method
):
    """Issue 54, items 3 and 8: a stage's state_dict() was this rank's shard (1/N of Adam's
    moments, which rank 1 could not load). It is now refused until consolidated, then rank 0
    holds a plain optimizer's state, which every rank loads (one saved with a scheduler,
    which adds initial_lr to its groups, too)."""
    plain, runs = whole_runs
    for optimizer in OPTIMIZERS:
        expected = one_process(global_batches(5), optimizer)
        state = runs[world_size][0][method, optimizer, "state"]
        (theirs,) = plain[optimizer][0]["param_groups"]
        assert state["param_groups"] == [{k: v for k, v in theirs.items() if k != "initial_lr"}]
        torch.testing.assert_close(
            state["state"], plain[optimizer][0]["state"], rtol=1e-9, atol=1e-12
        )
        for rank, out in enumerate(runs[world_size]):
            assert "consolidate_state_dict(to=0) on every rank" in out[method, optimizer, "before"]
            if rank:
                assert f"rank 0 holds it, this is {rank}" in out[method, optimizer, "elsewhere"]
            for resume in ("resumed", "from plain"):
                torch.testing.assert_close(
                    out[method, optimizer, resume], expected, rtol=1e-9, atol=1e-12
                )


class _Recording(torch.optim.SGD):
    """SGD whose step takes a keyword, as some optimizers' do; it records what it got."""

    seen: list = []

    def step(self, closure=None, scale=1.0):
        _Recording.seen.append(scale)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(scale)
        return super().step(closure)


@pytest.mark.parametrize("stage", [Zero1, Zero2, Zero3])
def test_step_passes_its_keywords_to_the_inner_optimizer(stage):
    """Issue 54, item 11: the stages' step(**kwargs) raised TypeError; torch's
    ZeroRedundancyOptimizer hands the keywords to the optimizer it wraps."""
    from torch import nn

    from .test_bad_input import in_group

    def run():
        torch.manual_seed(0)
        net = nn.Linear(3, 2)
        before = net.weight.detach().clone()
        opt = stage(net, _Recording, lr=0.1)
        net(torch.ones(4, 3)).sum().backward()
        grad = torch.ones(4, 3).sum(0).expand(2, 3)  # d(sum of outputs)/d(weight)
        opt.step(scale=0.5)
        if isinstance(opt, Zero3):
            (after, _) = opt.full_parameters()
        else:
            after = net.weight.detach()
        return before, after, grad

    _Recording.seen.clear()
    before, after, grad = in_group(run)
    assert _Recording.seen == [0.5]
    torch.testing.assert_close(after, before - 0.1 * 0.5 * grad)
