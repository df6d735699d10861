import pytest
import torch

from companion.core.data import load_mnist_sample
from companion.core.loaders import load_iters
from companion.core.lr import linear_lr, lr_schedule, scaled_lr, warmup_lr
from companion.core.models import get_model
from companion.core.training import flat_params, set_seed, sgd_steps, train

pytestmark = pytest.mark.ch1


def test_scaled_lr_rules():
    assert scaled_lr(0.1, 4, "linear") == linear_lr(0.1, 4)  # one rule, chapters 5 and 7
    assert scaled_lr(0.1, 4, "none") == 0.1
    assert scaled_lr(0.1, 4, "linear") == pytest.approx(0.4)
    with pytest.raises(ValueError, match="rule"):
        scaled_lr(0.1, 4, "sqrt")


def test_warmup_ramps_linearly_then_holds():
    lrs = [warmup_lr(s, 0.1, 0.5, 4) for s in range(6)]
    assert lrs == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.5])
    schedule = lr_schedule(0.1, 4, "warmup", steps_per_epoch=3, warmup_epochs=2)
    assert schedule(0) == pytest.approx(0.1) and schedule(6) == pytest.approx(0.4)
    assert schedule(3) == pytest.approx(0.25)


@pytest.mark.parametrize("schedule", [None, lambda step: 0.1])
def test_chapter_1s_train_with_a_constant_schedule_equals_plain_sgd(
    device, schedule, deterministic
):
    data = load_mnist_sample()
    train_iter, test_iter = load_iters(data, 100, device, seed=0)
    set_seed(0)
    net = get_model("lenet").to(device)
    records = train(
        net,
        train_iter,
        test_iter,
        epochs=1,
        lr=0.1,
        lr_schedule=schedule,
        profile="ci",
        warmup_steps=0,
        precision="fp32",
        channels_last=False,
    )
    set_seed(0)
    expected = sgd_steps(
        get_model("lenet").to(device),
        load_iters(data, 100, device, seed=0)[0],
        0.1,
        len(train_iter),
    )
    torch.testing.assert_close(flat_params(net), expected)
    assert len(records) == 1 and 0 <= records[0].test_acc <= 1


def test_the_schedule_sets_the_rate_of_every_step(device):
    """A schedule that is 0 after step 2 freezes the model after 2 steps: SGD for 2 steps."""
    data = load_mnist_sample()
    train_iter, test_iter = load_iters(data, 100, device, seed=0)
    set_seed(0)
    net = get_model("lenet").to(device)
    train(
        net,
        train_iter,
        test_iter,
        epochs=2,
        lr=0.1,
        lr_schedule=lambda s: 0.1 if s < 2 else 0.0,
        profile="ci",
        warmup_steps=0,
        precision="fp32",
        channels_last=False,
    )
    set_seed(0)
    expected = sgd_steps(
        get_model("lenet").to(device), load_iters(data, 100, device, seed=0)[0], 0.1, 2
    )
    torch.testing.assert_close(flat_params(net), expected)
