import pytest
import torch

from companion.core import (
    DeviceLoader,
    ImageSet,
    data_loader,
    describe_setup,
    get_profile,
    load_data,
    load_fashion_mnist,
    load_iters,
    load_mnist_sample,
)

pytestmark = pytest.mark.ch1


def test_sample_split_is_stratified_disjoint_and_fixed(sample):
    assert (len(sample.train), len(sample.test)) == (4000, 1000)
    assert torch.bincount(sample.test.labels).tolist() == [100] * 10
    assert torch.bincount(sample.train.labels).tolist() == [400] * 10
    # Not sorted by label any more (the raw rows are), and the same on every call.
    assert sample.train.labels[:50].unique().numel() > 5
    again = load_mnist_sample()
    assert torch.equal(again.test.images, sample.test.images)
    # No image is in both splits.
    train_rows = {bytes(x.numpy()) for x in sample.train.images}
    assert not any(bytes(x.numpy()) in train_rows for x in sample.test.images)


def test_other_seed_gives_other_split(sample):
    assert not torch.equal(load_mnist_sample(seed=1).test.images, sample.test.images)


def test_bad_test_fraction():
    with pytest.raises(ValueError, match="between 0 and 1"):
        load_mnist_sample(test_fraction=1.0)


def test_imageset_item_is_like_to_tensor(sample):
    X, y = sample.train[0]
    assert X.shape == (1, 28, 28) and X.dtype == torch.float32
    assert 0 <= X.min() and X.max() <= 1 and y.dtype == torch.int64
    Xs, ys = sample.train.tensors()
    assert torch.equal(Xs[0], X) and ys[0] == y


def test_imageset_rejects_bad_inputs():
    with pytest.raises(ValueError, match="uint8"):
        ImageSet(torch.zeros(3, 28, 28), torch.zeros(3))
    with pytest.raises(ValueError, match="3 images but 2 labels"):
        ImageSet(torch.zeros(3, 28, 28, dtype=torch.uint8), torch.zeros(2))


def test_fashion_mnist_reads_torchvision_raw_layout_offline(tiny_fashion_root, capsys):
    d = load_fashion_mnist(tiny_fashion_root, download=False)
    assert (len(d.train), len(d.test)) == (12, 5) and d.name == "Fashion-MNIST"
    assert d.train.labels.tolist() == [i % 10 for i in range(12)]
    X, y = d.train[3]
    assert X.shape == (1, 28, 28) and int(y) == 3 and d.classes[0] == "t-shirt"
    # The same files through load_data, which prints what is in use.
    d2 = load_data("fashion-mnist", root=tiny_fashion_root, download=False)
    assert "data: Fashion-MNIST\n      12 training and 5 test images" in capsys.readouterr().out
    assert torch.equal(d2.test.images, d.test.images)


def test_missing_fashion_mnist_offline_names_the_fallback(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"offline MNIST sample: load_data\('mnist-sample'\)"
    ):
        load_data("fashion-mnist", root=tmp_path, download=False)


def test_failed_download_is_the_same_clear_error(tmp_path, monkeypatch):
    import torchvision.datasets.mnist as tv_mnist

    def no_network(*args, **kwargs):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz")

    monkeypatch.setattr(tv_mnist.MNIST, "download", no_network)
    with pytest.raises(FileNotFoundError, match="the download failed"):
        load_fashion_mnist(tmp_path, download=True)


def test_cpu_profile_falls_back_to_the_sample_and_says_so(tmp_path, capsys):
    d = load_data(get_profile("cpu"), root=tmp_path, download=False)
    out = capsys.readouterr().out
    assert "using the offline MNIST sample" in out and d.name.startswith("MNIST offline sample")


def test_a_profile_s_name_loads_that_profile_s_data(tmp_path, capsys):
    """``load_data("cpu")`` is ``load_data(get_profile("cpu"))``, fallback included."""
    d = load_data("cpu", root=tmp_path, download=False)
    assert "using the offline MNIST sample" in capsys.readouterr().out
    assert d.name.startswith("MNIST offline sample") and load_data("ci").name == d.name


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown data set 'cifar'; .* or a profile \\('ci'"):
        load_data("cifar")


def test_profile_from_env(monkeypatch, capsys):
    monkeypatch.setenv("BOOK_PROFILE", "ci")
    assert load_data().name.startswith("MNIST offline sample")
    assert "data: MNIST offline sample" in capsys.readouterr().out


@pytest.mark.parametrize(
    "batch_size,drop_last,expected", [(64, False, 63), (64, True, 62), (4000, False, 1)]
)
def test_device_loader_lengths_and_coverage(sample, batch_size, drop_last, expected):
    it = DeviceLoader(sample.train, batch_size, drop_last=drop_last)
    batches = list(it)
    assert len(it) == len(batches) == expected
    if not drop_last:
        seen = torch.cat([y for _, y in batches])
        assert sorted(seen.tolist()) == sorted(sample.train.labels.tolist())


def test_device_loader_reshuffles_each_epoch_and_repeats_with_the_seed(sample):
    a, b = DeviceLoader(sample.train, 32, seed=7), DeviceLoader(sample.train, 32, seed=7)
    first_a, second_a = [next(iter(a))[1] for _ in range(2)]
    first_b = next(iter(b))[1]
    assert torch.equal(first_a, first_b) and not torch.equal(first_a, second_a)


def test_unshuffled_loaders_agree_batch_by_batch(sample):
    for (Xa, ya), (Xb, yb) in zip(
        DeviceLoader(sample.test, 100, shuffle=False), data_loader(sample.test, 100, shuffle=False)
    ):
        torch.testing.assert_close(Xa, Xb)
        assert torch.equal(ya, yb)


def test_data_loader_is_seeded(sample):
    def first(seed):
        return next(iter(data_loader(sample.train, 16, seed=seed)))[1]

    assert torch.equal(first(3), first(3)) and not torch.equal(first(3), first(4))


@pytest.mark.parametrize("bad", [0, -5, 2.5, None])
def test_bad_batch_sizes(sample, bad):
    with pytest.raises(ValueError, match="positive integer"):
        DeviceLoader(sample.train, bad)
    with pytest.raises(ValueError, match="positive integer"):
        data_loader(sample.train, bad)


def test_load_iters_kinds(sample):
    tr, te = load_iters(sample, 50)
    assert isinstance(tr, DeviceLoader) and not te.shuffle
    tr, te = load_iters(sample, 50, resident=False)
    assert isinstance(tr, torch.utils.data.DataLoader)


def test_synthetic_data_is_fashion_mnist_shaped_deterministic_and_says_what_it_is():
    from companion.core import load_synthetic

    a, b = load_synthetic(200, 50, seed=1), load_synthetic(200, 50, seed=1)
    assert (len(a.train), len(a.test)) == (200, 50) and len(a.classes) == 10
    assert a.train.images.dtype == torch.uint8 and a.train.images.shape == (200, 28, 28)
    assert torch.equal(a.train.images, b.train.images) and torch.equal(a.test.labels, b.test.labels)
    assert not torch.equal(load_synthetic(200, 50, seed=2).train.images, a.train.images)
    assert "synthetic" in a.name and set(a.train.labels.tolist()) <= set(range(10))


def test_book_data_replaces_the_profile_data_set_and_refuses_unknown_names(monkeypatch, capsys):
    from companion.core import get_profile

    monkeypatch.setenv("BOOK_DATA", "synthetic")
    profile = get_profile("ci")
    assert profile.dataset == "synthetic" and "data set synthetic" in describe_setup(profile)
    data = load_data(profile)
    assert "synthetic" in data.name and "synthetic" in capsys.readouterr().out
    monkeypatch.setenv("BOOK_DATA", "imagenet")
    with pytest.raises(ValueError, match="BOOK_DATA='imagenet' is not a data set.*synthetic"):
        get_profile("ci")


def test_device_loader_serves_each_epochs_permutation_in_order(sample):
    """Gathered once per epoch, sliced per batch: batch ``k`` of epoch ``e`` holds the
    samples at positions ``k*b .. (k+1)*b - 1`` of that epoch's seeded permutation, as a
    gather per batch served them (the committed runs' batches are unchanged)."""
    loader, g = DeviceLoader(sample.train, 48, seed=5), torch.Generator().manual_seed(5)
    X, y = sample.train.tensors()
    for _ in range(2):
        order = torch.randperm(len(y), generator=g)
        for k, (Xb, yb) in enumerate(loader):
            idx = order[k * 48 : (k + 1) * 48]
            assert torch.equal(Xb, X[idx]) and torch.equal(yb, y[idx])
            assert Xb.is_contiguous()
        assert k == len(loader) - 1
