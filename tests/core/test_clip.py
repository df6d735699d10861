"""Gradient clipping as an option of the loop: equal, bit for bit in float64, to calling
``clip_grad_norm_`` between backward and step, with tied, frozen and unused parameters."""

import pytest
import torch
from torch import nn

from companion.core import (
    DeviceLoader,
    ImageSet,
    clip_before_step,
    flat_params,
    lenet,
    set_seed,
    sgd_steps,
    train,
)

pytestmark = pytest.mark.ch5


class Awkward(nn.Module):
    """A layer used twice (tied), a frozen layer, and a parameter forward never uses."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)
        self.shared = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)
        self.unused = nn.Parameter(torch.ones(5))

    def forward(self, x):
        return self.head(torch.tanh(self.shared(torch.tanh(self.shared(self.frozen(x))))))


def batches(steps: int, n: int = 12):
    g = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(n, 8, generator=g, dtype=torch.float64),
            torch.randint(0, 3, (n,), generator=g),
        )
        for _ in range(steps)
    ]


def by_hand(net: nn.Module, data, lr: float, max_norm: float) -> tuple[torch.Tensor, list]:
    """The textbook loop: backward, ``clip_grad_norm_``, step."""
    opt, norms = torch.optim.SGD(net.parameters(), lr=lr), []
    for X, y in data:
        opt.zero_grad(set_to_none=True)
        nn.CrossEntropyLoss()(net(X), y).backward()
        norms.append(nn.utils.clip_grad_norm_(net.parameters(), max_norm))
        opt.step()
    return flat_params(net), norms


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
def test_the_hook_clips_as_clip_grad_norm_between_backward_and_step(max_norm):
    data = batches(6)
    set_seed(0)
    reference = Awkward().double()
    net = Awkward().double()
    net.load_state_dict(reference.state_dict())
    want, want_norms = by_hand(reference, data, 0.5, max_norm)
    norms = []
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    clip_before_step(opt, max_norm, norms)
    for X, y in data:
        opt.zero_grad(set_to_none=True)
        nn.CrossEntropyLoss()(net(X), y).backward()
        opt.step()
    assert torch.equal(flat_params(net), want)
    assert torch.equal(torch.stack(norms), torch.stack(want_norms))
    assert net.unused.grad is None and net.frozen.weight.grad is None
    fired = sum(n > max_norm for n in norms)
    assert fired == (len(data) if max_norm < 1 else 0)  # the test's two regimes, as meant


def test_sgd_steps_clips_and_clipping_changes_the_result():
    data = batches(6)
    runs = {}
    for clip in (None, 0.05):
        set_seed(0)
        runs[clip] = sgd_steps(Awkward().double(), data, 0.5, len(data), clip)
    set_seed(0)
    want, _ = by_hand(Awkward().double(), data, 0.5, 0.05)
    assert torch.equal(runs[0.05], want)
    assert not torch.allclose(runs[0.05], runs[None])


def test_removing_the_handle_stops_clipping():
    data = batches(3)
    set_seed(0)
    net = Awkward().double()
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    norms = []
    clip_before_step(opt, 0.05, norms).remove()
    for X, y in data:
        opt.zero_grad()
        nn.CrossEntropyLoss()(net(X), y).backward()
        opt.step()
    assert norms == []


def test_train_takes_clip():
    """``core.train(clip=...)``: a norm no step reaches changes nothing, bit for bit; a
    small one changes the training."""
    g = torch.Generator().manual_seed(0)
    images = ImageSet(
        torch.randint(0, 256, (96, 28, 28), generator=g, dtype=torch.uint8),
        torch.randint(0, 10, (96,), generator=g),
    )
    results = {}
    for clip in (None, 1e6, 0.01):
        set_seed(0)
        net = lenet()
        train_iter = DeviceLoader(images, 32, "cpu", shuffle=False)
        test_iter = DeviceLoader(images, 32, "cpu", shuffle=False)
        train(net, train_iter, test_iter, epochs=2, lr=0.1, profile="ci", clip=clip, warmup_steps=0)
        results[clip] = flat_params(net)
    assert torch.equal(results[1e6], results[None])
    assert not torch.allclose(results[0.01], results[None])


def test_under_a_loss_scaler_the_hook_sees_the_unscaled_gradient():
    """fp16's ``GradScaler.step`` unscales, then calls ``optimizer.step()``: the pre-hook
    clips the true gradient, not the scaled one (the scaler's CPU build, fp32 math)."""
    data = batches(3)
    set_seed(0)
    reference = Awkward().double()
    net = Awkward().double()
    net.load_state_dict(reference.state_dict())
    want, want_norms = by_hand(reference, data, 0.5, 0.05)
    opt, norms = torch.optim.SGD(net.parameters(), lr=0.5), []
    clip_before_step(opt, 0.05, norms)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    for X, y in data:
        opt.zero_grad(set_to_none=True)
        scaler.scale(nn.CrossEntropyLoss()(net(X), y)).backward()
        scaler.step(opt)
        scaler.update()
    torch.testing.assert_close(torch.stack(norms), torch.stack(want_norms))
    torch.testing.assert_close(flat_params(net), want)
