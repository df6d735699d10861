import pytest
import torch

from companion.core import ConvNet, count_parameters, get_model, lenet, resnet18

pytestmark = pytest.mark.ch1


@pytest.mark.parametrize("name", ["lenet", "resnet18", "convnet", "lenet-bn"])
def test_models_map_images_to_ten_logits(name):
    net = get_model(name).eval()
    assert net(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_resnet18_matches_d2l_shapes_count_and_order():
    d2l = pytest.importorskip("d2l.torch")
    theirs = d2l.resnet18(10, 1)
    theirs(torch.zeros(2, 1, 28, 28))  # d2l builds lazily: materialise its parameters first
    ours = resnet18(10, 1)
    assert [p.shape for p in ours.parameters()] == [p.shape for p in theirs.parameters()]
    assert count_parameters(ours) == count_parameters(theirs) == 11_175_818
    # With d2l's weights loaded, both compute the same function.
    ours.load_state_dict(theirs.state_dict())
    X = torch.randn(4, 1, 28, 28)
    torch.testing.assert_close(ours.eval()(X), theirs.eval()(X))


def test_lenet_starts_xavier_with_zero_bias():
    torch.manual_seed(0)
    net = lenet()
    conv = net[0]
    bound = (6 / (1 * 25 + 6 * 25)) ** 0.5
    assert conv.bias.abs().sum() == 0 and conv.weight.abs().max() <= bound


def test_convnet_returns_logits_not_probabilities():
    torch.manual_seed(0)
    out = ConvNet().eval()(torch.rand(5, 1, 28, 28))
    assert not torch.allclose(out.sum(dim=1), torch.ones(5))


def test_unknown_model():
    with pytest.raises(
        ValueError, match="unknown model 'vgg'; choose one of lenet, resnet18, convnet, lenet-bn"
    ):
        get_model("vgg")


def test_lenet_bn_is_lenet_with_batchnorm_after_each_convolution():
    net = get_model("lenet-bn")
    kinds = [type(m).__name__ for m in net]
    assert kinds[:6] == ["Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "Conv2d", "BatchNorm2d"]
    assert {n for n, _ in net.named_buffers()} >= {"1.running_mean", "5.running_var"}
    assert count_parameters(net) == count_parameters(lenet()) + 2 * (6 + 16)
