"""Chapter 5's loop and precision as a run variable: every training path honours the profile's
MathMode (bf16 on the CPU here) or refuses anything but fp32 with an error that says what to do."""

import pytest
import torch
import torch.distributed as dist

from companion.collectives import train_worker
from companion.core import get_model, load_data, load_iters, set_seed, try_devices
from companion.ddp import DDPConfig, train_ddp, train_with_mistake
from companion.elastic import ElasticOptions, train_elastic
from companion.split import training as split_training
from companion.study.methods import RunSpec, run_method

pytestmark = pytest.mark.ch5


@pytest.fixture(scope="module")
def small():
    data = load_data("mnist-sample", verbose=False)
    data.train.images, data.train.labels = data.train.images[:256], data.train.labels[:256]
    data.test.images, data.test.labels = data.test.images[:64], data.test.labels[:64]
    return data


@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_chapter_5s_loop_and_chapter_8s_trainer_run_in_bf16_and_say_so(
    small, one_process_group, tmp_path
):
    options = {"epochs": 1, "global_batch": 64, "channels_last": False}
    fp32 = train_ddp(small, "ci", precision="fp32", **options)
    bf16 = train_ddp(small, "ci", precision="bf16", **options)
    assert [r.precision for r in fp32.records] == ["fp32"] and [
        r.precision for r in bf16.records
    ] == ["bf16"]
    assert not torch.equal(fp32.params, bf16.params)  # the switch changed the math
    assert (
        abs(fp32.records[0].train_loss - bf16.records[0].train_loss) < 0.05
    )  # chapter 1's tolerance
    cfg = DDPConfig("ci", precision="bf16", **options)
    elastic = train_elastic(small, cfg, ElasticOptions(str(tmp_path / "s.pt"), snapshot_every=2))
    assert [r.precision for r in elastic.records] == ["bf16"]


def test_paths_that_compute_in_fp32_only_refuse_bf16(small):
    device = try_devices(1, verbose=False)[0]
    train_iter, test_iter = load_iters(small, 64, device)
    set_seed(0)
    with pytest.raises(
        ValueError, match=r"split.train computes in fp32 only, got precision='bf16'"
    ):
        split_training.train(
            get_model("lenet"),
            train_iter,
            test_iter,
            [device, device],
            epochs=1,
            lr=0.1,
            precision="bf16",
        )
    with pytest.raises(ValueError, match=r"train_worker computes in fp32 only"):
        train_worker(0, 1, small, "ci", precision="bf16")
    with pytest.raises(ValueError, match=r"train_with_mistake computes in fp32 only"):
        train_with_mistake(0, 1, small, precision="bf16")


def test_a_study_run_carries_one_precision_to_every_method(small):
    spec = RunSpec(small, "lenet", 1, 64, 0.1, 1, profile="ci", precision="bf16")
    assert [r.precision for r in run_method("reference", spec)] == ["bf16"]
    with pytest.raises(ValueError, match="fp32 only"):
        run_method("split", spec)
    with pytest.raises(ValueError, match="precision"):
        RunSpec(small, "lenet", 1, 64, 0.1, 1, precision="fp8")
    fp32 = RunSpec(small, "lenet", 1, 64, 0.1, 1, profile="ci")
    assert {r.precision for name in ("reference", "split") for r in run_method(name, fp32)} == {
        "fp32"
    }


@pytest.mark.parametrize(
    "model, channels_last, quiet",
    [
        ("lenet", True, True),  # conv1 has one input channel: two stride tuples, one memory order
        ("lenet", False, False),
        ("resnet18", True, True),  # the gpu profile's model: the warning seen on an H200
    ],
)
def test_only_a_nominal_stride_warning_of_a_channels_last_model_is_silenced(
    model, channels_last, quiet
):
    import warnings

    from companion.core.precision import MathMode
    from companion.ddp.loop import quiet_nominal_strides

    net = MathMode("fp32", "cpu", channels_last).place(get_model(model), "cpu")

    def step(*_):  # what DDP's reducer does in backward, then another warning
        warnings.warn(
            "Grad strides do not match bucket view strides. This may indicate ...",
            UserWarning,
            stacklevel=1,
        )
        warnings.warn("another warning", UserWarning, stacklevel=1)
        return "stepped"

    filters = list(warnings.filters)
    quiet_step = quiet_nominal_strides(net, MathMode("fp32", "cpu", channels_last), step)
    assert (quiet_step is not step) is quiet and warnings.filters == filters
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert quiet_step() == "stepped"
        step()  # outside the step, the process's filters are as they were
    shown = [str(w.message).split(".")[0] for w in seen]
    grads = "Grad strides do not match bucket view strides"
    assert shown == (["another warning"] if quiet else [grads, "another warning"]) + [
        grads,
        "another warning",
    ]
