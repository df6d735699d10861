"""train_slowlinks hands DiLoCo's inner learning rate to its AdamW (it used to keep 1e-3)."""

import pytest
import torch.distributed as dist

from companion.core import load_data
from companion.slowlinks import train_slowlinks

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
    options = {"method": "DiLoCo H2", "epochs": 1, "global_batch": 64, "verbose": False}

    def final_loss(inner_lr: float) -> float:
        return train_slowlinks(data, "ci", inner_lr=inner_lr, **options).records[-1].train_loss

    first, again, other = final_loss(1e-3), final_loss(1e-3), final_loss(3e-2)
    assert again == first  # the same rate: the same run, number for number
    assert abs(other - first) > 1e-3  # another rate: another run
