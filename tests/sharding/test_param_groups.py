"""Issue 54, item 9: the stages take parameter groups, as torch's optimizers do (nanoGPT's
AdamW with weight decay on matrices only, and a group with its own learning rate). Each
stage equals one process's AdamW over the same groups, in float64, at world sizes 1, 2 and
4 with uneven local shares; its whole state is that optimizer's state; a plain optimizer's
state and a sharded checkpoint load into it; and bad groups get clear errors."""

import pytest
import torch
from torch import nn

from companion.runtime import launch
from companion.sharding import Zero1, Zero2, Zero3
from companion.sharding.verify import global_batches

from .test_bad_input import in_group
from .workers import _decay_groups, groups_one_process, groups_worker

pytestmark = pytest.mark.ch9
METHODS = ("ZeRO-1", "ZeRO-2", "ZeRO-3")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    batches = global_batches(5)
    expected, plain = groups_one_process(batches)
    out = {}
    for n in (1, 2, 4):
        path = tmp_path_factory.mktemp(f"groups{n}")
        out[n] = launch(groups_worker, n, batches, plain, str(path), backend="gloo", timeout=300)
    return expected, plain, out


def test_the_groups_matter():
    """Without the groups (one weight decay for all), the run ends elsewhere."""
    from companion.sharding.training import full_parameters
    from companion.sharding.verify import _model

    expected, _ = groups_one_process(global_batches(5))
    net = _model()
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-2)
    for X, y in global_batches(5):
        nn.functional.cross_entropy(net(X), y).backward()
        opt.step()
        opt.zero_grad()
    assert not torch.allclose(full_parameters(net, opt), expected)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", METHODS)
def test_grouped_stages_train_and_resume_as_one_process(runs, world_size, method):
    expected, plain, out = runs
    for rank, got in enumerate(out[world_size]):
        for what in ("trained", "from plain", "from checkpoint"):
            torch.testing.assert_close(
                got[method, what],
                expected,
                rtol=1e-9,
                atol=1e-12,
                msg=lambda m: f"{what}, rank {rank}: {m}",
            )
    state = out[world_size][0][method, "state"]
    assert state["param_groups"] == plain[0]["param_groups"]
    torch.testing.assert_close(state["state"], plain[0]["state"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("stage", [Zero1, Zero2, Zero3])
def test_bad_groups_get_clear_errors(stage):
    def net():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
        m[1].bias.requires_grad_(False)
        return m

    def build(groups):
        m = net()
        return in_group(lambda: stage(m, torch.optim.AdamW, params=groups(m), lr=0.1))

    name = stage.__name__
    with pytest.raises(
        ValueError, match=rf"{name}: the groups leave out trainable parameters \['1.weight'\]"
    ):
        build(lambda m: [m[0].weight, m[0].bias])
    with pytest.raises(
        ValueError,
        match=rf"{name}: 0.weight is in group 0 and group 1: put each parameter in one group",
    ):
        build(
            lambda m: [{"params": [m[0].weight]}, {"params": [m[0].weight, m[0].bias, m[1].weight]}]
        )
    with pytest.raises(ValueError, match=rf"{name}: group 0 holds 1.bias, a frozen parameter"):
        build(lambda m: [m[0].weight, m[0].bias, m[1].weight, m[1].bias])
    with pytest.raises(
        ValueError,
        match=rf"{name}: group 1 holds a tensor of shape \(3,\), not a parameter of the model",
    ):
        build(
            lambda m: [
                {"params": [m[0].weight, m[0].bias, m[1].weight]},
                {"params": [nn.Parameter(torch.ones(3))]},
            ]
        )
    with pytest.raises(
        TypeError,
        match=rf"{name}: params must be the model's trainable parameters or a list of groups",
    ):
        build(lambda m: [])
    opt = build(lambda m: _decay_groups(m))
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    with pytest.raises(NotImplementedError, match=r"give their groups when building it"):
        opt.add_param_group({"params": [nn.Parameter(torch.ones(2))]})
