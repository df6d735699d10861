"""train_slowlinks hands DiLoCo's inner learning rate to its AdamW (it used to keep 1e-3),
refuses fp16 for the methods that meet inside ``step()``, and trains every method of the
chapter's table, looked up by name (a key, never parsed) or passed as a SlowMethod."""

import pickle

import pytest
import torch.distributed as dist

from companion.core import load_data
from companion.slowlinks import METHODS, SlowMethod, diloco, train_slowlinks

pytestmark = pytest.mark.ch10


@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_diloco_s_inner_lr_reaches_its_inner_optimizer(one_process_group):
    data = load_data("mnist-sample", verbose=False)
    data.train.images, data.train.labels = data.train.images[:256], data.train.labels[:256]
    data.test.images, data.test.labels = data.test.images[:64], data.test.labels[:64]
    options = {"method": diloco(2), "epochs": 1, "global_batch": 64, "verbose": False}

    def final_loss(inner_lr: float) -> float:
        return train_slowlinks(data, "ci", inner_lr=inner_lr, **options).records[-1].train_loss

    first, again, other = final_loss(1e-3), final_loss(1e-3), final_loss(3e-2)
    assert again == first  # the same rate: the same run, number for number
    assert abs(other - first) > 1e-3  # another rate: another run


@pytest.mark.parametrize("method", ["local SGD H4", "DiLoCo H16"])
def test_fp16_is_refused_where_the_meeting_is_inside_step(one_process_group, small, method):
    """A per-rank loss scaler skips step() on the rank that overflowed, and with it the
    meeting the other ranks wait in: refused before the first step, with what to do."""
    with pytest.raises(ValueError, match=rf"{method} meets inside optimizer.step\(\).*fp32"):
        train_slowlinks(small, "ci", method=method, precision="fp16", epochs=1, verbose=False)


def test_fp16_trains_the_methods_that_average_in_backward(one_process_group, small):
    result = train_slowlinks(
        small, "ci", method="fp16", precision="fp16", epochs=1, max_steps=2, verbose=False
    )
    assert result.steps == 2 and result.records[-1].precision == "fp16"


def test_the_table_s_keys_are_its_methods_names_and_it_travels_to_workers():
    assert all(isinstance(m, SlowMethod) and m.name == name for name, m in METHODS.items())
    assert "Streaming DiLoCo H16" in METHODS and "DiLoCo H4" in METHODS
    again = pickle.loads(pickle.dumps(METHODS))  # launch() pickles a worker's arguments
    assert [m.name for m in again.values()] == list(METHODS)


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_of_the_table_trains(one_process_group, small, method):
    """20 steps: every method communicates but DiLoCo H64, whose first meeting is at step 64
    (Streaming DiLoCo H16's four fragments each meet once, every exchange landing a step later)."""
    result = train_slowlinks(
        small, "ci", method=method, epochs=1, max_steps=20, global_batch=16, verbose=False
    )
    assert result.steps == 20 and result.records[-1].method == method
    assert bool(result.ledger.calls) == (method != "DiLoCo H64")  # H64 meets at step 64
