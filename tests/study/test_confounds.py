import pytest
import torch

from companion.core.data import load_mnist_sample
from companion.core.models import get_model
from companion.study.confounds import carried_over, init_weights_as_published, train_as_published
from companion.study.driver import subset

pytestmark = pytest.mark.ch7


def test_the_published_reinit_leaves_batchnorm_state_behind():
    data = subset(load_mnist_sample(), 128, 32)
    net = get_model("lenet-bn")
    train_as_published(net, 2, data, 64, 0.1, 1, profile="ci")
    trained = {k: v.clone() for k, v in net.state_dict().items() if "running" in k}
    net.apply(init_weights_as_published)  # what the next call of seed 002's train starts with
    fresh = get_model("lenet-bn").state_dict()
    for name, value in trained.items():
        assert torch.equal(net.state_dict()[name], value)  # carried into the next run
        assert not torch.equal(value, fresh[name])  # and not what a new model has
    kept = carried_over(net)
    assert kept["BatchNorm running statistics kept"] > 0
    assert kept["parameters kept (biases, BatchNorm scale and shift)"] > 0
