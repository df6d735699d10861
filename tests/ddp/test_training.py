"""DDP equals one process on the global batch (1, 2, 4 ranks), in float64 whatever the one
process's threads; logging, checkpoint, lr scaling."""

import pytest
import torch

from companion.core import (
    Data,
    DeviceLoader,
    ImageSet,
    MathMode,
    evaluate_accuracy,
    get_model,
    load_data,
)
from companion.ddp import ddp_worker, diagnose, linear_lr, train_ddp, train_reference_ddp
from companion.runtime import WorkerError, launch, load_checkpoint, read_scalars
from tests.threads import THREADS, at_each_thread_count

pytestmark = pytest.mark.ch5

GLOBAL_BATCH, LR, EPOCHS = 48, 0.1, 2


@pytest.fixture(scope="module")
def first_thousand() -> Data:
    """Chapter 5's check's data: the first 1,000 training images (with the cpu profile's batch
    of 128, 12 steps run past the first epoch; in float32 the reference's threads changed
    the verdict there)."""
    data = load_data("mnist-sample", verbose=False)
    return Data(
        "the first 1,000",
        ImageSet(data.train.images[:1000], data.train.labels[:1000]),
        data.test,
        data.classes,
    )


def steps_per_epoch(n: int, world_size: int, global_batch: int) -> int:
    per_rank = -(-n // world_size)  # DistributedSampler pads to equal shares
    return -(-per_rank // (global_batch // world_size))


def run_ddp(world_size: int, data, **options):
    """``ddp_worker`` on ``world_size`` gloo ranks, with the tests' global batch and lr unless
    ``options`` give others."""
    options = {"global_batch": GLOBAL_BATCH, "lr": LR, "timeout": 180, **options}
    return launch(ddp_worker, world_size, data, "ci", backend="gloo", **options)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_ddp_equals_one_process_on_the_global_batch(small, tmp_path, world_size):
    checkpoint, log_dir = tmp_path / "model.pt", tmp_path / "logs"
    results = run_ddp(
        world_size,
        small,
        epochs=EPOCHS,
        log_dir=str(log_dir),
        checkpoint=str(checkpoint),
        precision="fp64",
    )
    steps = EPOCHS * steps_per_epoch(len(small.train), world_size, GLOBAL_BATCH)
    reference = dict(global_batch=GLOBAL_BATCH, lr=LR, precision="fp64")
    expected = train_reference_ddp(world_size, small, "ci", steps=steps, **reference)
    start = train_reference_ddp(world_size, small, "ci", steps=0, **reference)
    assert not torch.allclose(expected, start)  # training did move the parameters
    for rank, result in enumerate(results):
        assert torch.equal(result.params, results[0].params), f"rank {rank}'s replica drifted"
        torch.testing.assert_close(result.params, expected)
        assert len(result.records) == (EPOCHS if rank == 0 else 0)
    assert diagnose([r.trace for r in results], len(small.train)) == []
    # every rank read its sampler share in each epoch; together they cover the data set
    for epoch in range(EPOCHS):
        read = torch.cat([r.trace.orders[epoch] for r in results])
        assert len(read) == -(-len(small.train) // world_size) * world_size
        assert set(read.tolist()) == set(range(len(small.train)))

    records = results[0].records
    assert [(r.method, r.n_devices, r.epoch) for r in records] == [
        ("DDP", world_size, 1),
        ("DDP", world_size, 2),
    ]
    assert all(r.sec_per_epoch > 0 and r.samples_per_sec > 0 and r.profile == "ci" for r in records)
    assert all(r.precision == "fp64" for r in records)
    # the CPU share is kept for one process only: waiting for the other ranks lowers it
    assert all((r.cpu_share is None) == (world_size > 1) for r in records)
    assert all(r.virtual == (world_size > 1) for r in records)  # CPU processes: virtual
    # the checkpoint holds the unwrapped model: it loads into a plain LeNet (in float64, as
    # trained), which scores on the whole test set, in one process, exactly the accuracy the
    # ranks computed together
    state = torch.load(checkpoint, weights_only=True)
    assert not any(k.startswith("module.") for k in state)
    net = load_checkpoint(MathMode("fp64", "cpu").place(get_model("lenet"), "cpu"), checkpoint)
    torch.testing.assert_close(
        torch.cat([p.detach().reshape(-1) for p in net.parameters()]),
        results[0].params,
        rtol=0,
        atol=0,
    )
    assert (
        evaluate_accuracy(net, DeviceLoader(small.test, 256, shuffle=False)) == records[-1].test_acc
    )
    # TensorBoard holds one point per epoch for each scalar, with the recorded values
    scalars = read_scalars(log_dir)
    assert set(scalars) == {
        "train/loss",
        "test/accuracy",
        "time/seconds_per_epoch",
        "time/samples_per_second",
    }
    assert [step for step, _ in scalars["test/accuracy"]] == [1, 2]
    for tag, field in (("train/loss", "train_loss"), ("test/accuracy", "test_acc")):
        assert [v for _, v in scalars[tag]] == pytest.approx(
            [getattr(r, field) for r in records], rel=1e-6
        )


@pytest.mark.parametrize("world_size", [2, 4])
def test_in_float64_the_verdict_does_not_depend_on_the_one_process_s_threads(
    first_thousand, world_size
):
    """Chapter 5's check as the chapter runs it: the workers (cores // world_size threads each),
    launched once, equal the one-process reference computed at 1, 2 and 4 threads, with
    assert_close's float64 tolerances."""
    batch = 128
    steps = len(first_thousand.train) // batch + 5
    results = run_ddp(
        world_size,
        first_thousand,
        model="lenet",
        global_batch=batch,
        max_steps=steps,
        precision="fp64",
    )
    assert results[0].params.dtype == torch.float64 and results[0].records[-1].precision == "fp64"
    references = at_each_thread_count(
        lambda: train_reference_ddp(
            world_size,
            first_thousand,
            "ci",
            model="lenet",
            global_batch=batch,
            lr=LR,
            steps=steps,
            precision="fp64",
        )
    )
    assert list(references) == list(THREADS)
    for threads, expected in references.items():
        for rank, result in enumerate(results):
            torch.testing.assert_close(
                result.params,
                expected,
                msg=lambda m, t=threads, r=rank: f"one process at {t} thread(s), rank {r}: {m}",
            )


def test_the_reference_computes_in_the_precision_asked_for(small):
    fp32 = train_reference_ddp(1, small, "ci", global_batch=GLOBAL_BATCH, lr=LR, steps=2)
    fp64 = train_reference_ddp(
        1, small, "ci", global_batch=GLOBAL_BATCH, lr=LR, steps=2, precision="fp64"
    )
    assert (fp32.dtype, fp64.dtype) == (torch.float32, torch.float64)
    torch.testing.assert_close(fp32, fp64.float(), rtol=1e-4, atol=1e-5)  # the same steps
    assert not torch.equal(fp32.double(), fp64)  # in another precision


def test_fixed_per_rank_batch_with_linear_lr_scaling_equals_the_scaled_global_step(small):
    results = launch(
        ddp_worker,
        2,
        small,
        "ci",
        per_rank_batch=24,
        lr=LR / 2,
        scale_lr=True,
        max_steps=3,
        precision="fp64",
        timeout=120,
        backend="gloo",
    )
    expected = train_reference_ddp(
        2, small, "ci", global_batch=48, lr=LR, steps=3, precision="fp64"
    )
    torch.testing.assert_close(results[0].params, expected)
    assert (
        len(results[0].trace.orders) == 1 and len(results[0].trace.orders[0]) == 3 * 24
    )  # read so far


def test_one_process_returns_one_record_per_epoch(small):
    records = launch(ddp_worker, 1, small, "ci", epochs=1, timeout=120, backend="gloo")[0].records
    assert [(r.method, r.n_devices, r.epoch, r.model, r.dataset) for r in records] == [
        ("DDP", 1, 1, "lenet", "small")
    ]
    assert 0 <= records[0].test_acc <= 1


def test_bad_sizes_are_refused_with_what_to_do(small):
    with pytest.raises(WorkerError, match="choose a multiple of 2"):
        launch(ddp_worker, 2, small, "ci", global_batch=63, timeout=60)
    with pytest.raises(WorkerError, match="not both"):
        launch(ddp_worker, 1, small, "ci", global_batch=64, per_rank_batch=32, timeout=60)
    with pytest.raises(WorkerError, match="epochs must be a positive integer"):
        launch(ddp_worker, 1, small, "ci", epochs=0, timeout=60)


def test_outside_launch_and_torchrun_train_ddp_says_how_to_start_it(small, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="start this with torchrun.*or from Python with launch"):
        train_ddp(small, "ci")


def test_linear_lr():
    assert linear_lr(0.1, 4) == pytest.approx(0.4) and linear_lr(0.1, 1) == 0.1
    with pytest.raises(ValueError, match="lr must be a positive, finite number, got 0.0"):
        linear_lr(0.0, 2)


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_batchnorm_model_trains_with_the_checks_on(small, world_size):
    # the running statistics differ between ranks after the last step; the detectors must
    # compare them as DDP broadcast them, or they report a false ReplicasOutOfSync
    results = run_ddp(
        world_size, small, model="lenet-bn", global_batch=48, epochs=2, max_steps=8, checks=True
    )
    assert all(torch.equal(r.params, results[0].params) for r in results)
    assert len({r.trace.fingerprint for r in results}) == 1


def test_a_parameter_that_forward_never_uses_breaks_torchs_ddp_at_the_second_step():
    from tests.ddp.workers import plain_ddp_with_unused

    [message] = launch(plain_ddp_with_unused, 1, timeout=120, backend="gloo")
    assert "Expected to have finished reduction in the prior iteration" in message


@pytest.mark.parametrize("world_size", [1, 2])
def test_unused_parameters_are_named_before_training(small, world_size):
    from tests.ddp.workers import ddp_with_unused

    with pytest.raises(
        WorkerError, match=r"UnusedParameters.*\['unused'\].*find_unused_parameters=True"
    ):
        launch(ddp_with_unused, world_size, small, epochs=1, timeout=120, backend="gloo")


@pytest.mark.parametrize("world_size", [1, 2])
def test_find_unused_parameters_trains_like_one_process(small, monkeypatch, world_size):
    from tests.ddp import workers

    steps = 6
    results = launch(
        workers.ddp_with_unused,
        world_size,
        small,
        global_batch=GLOBAL_BATCH,
        lr=LR,
        epochs=1,
        max_steps=steps,
        find_unused_parameters=True,
        precision="fp64",
        timeout=180,
        backend="gloo",
    )
    monkeypatch.setitem(workers.MODELS, workers.UNUSED, workers.lenet_with_unused)
    expected = train_reference_ddp(
        world_size,
        small,
        "ci",
        model=workers.UNUSED,
        global_batch=GLOBAL_BATCH,
        lr=LR,
        steps=steps,
        precision="fp64",
    )
    for result in results:
        torch.testing.assert_close(result.params, expected)


@pytest.mark.multigpu
def test_nccl_ddp_on_two_gpus_equals_one_process(small):
    """On real GPUs: nccl, one GPU per rank, TF32 off; the reference runs on the CPU."""
    from companion.collectives import whoami
    from companion.core import strict_fp32

    assert [seen["backend"] for seen in launch(whoami, 2, timeout=120)] == ["nccl", "nccl"]
    with strict_fp32():  # NVIDIA_TF32_OVERRIDE=0 reaches the workers through the environment
        results = launch(
            ddp_worker, 2, small, "ci", global_batch=GLOBAL_BATCH, lr=LR, max_steps=5, timeout=300
        )
    expected = train_reference_ddp(2, small, "ci", global_batch=GLOBAL_BATCH, lr=LR, steps=5)
    assert torch.equal(results[0].params, results[1].params)
    # GPU and CPU kernels sum in different orders: fp32 rounding, compounded over 5 steps
    torch.testing.assert_close(results[0].params, expected, rtol=1e-4, atol=1e-5)


def test_mixed_precision_ddp_records_its_math_and_trains(small):
    """bf16 autocast under DDP (CPU processes here): the Record says so, the loss falls."""
    results = run_ddp(2, small, epochs=2, precision="bf16")
    records = results[0].records
    assert [r.precision for r in records] == ["bf16", "bf16"]
    assert records[1].train_loss < records[0].train_loss
    assert torch.equal(results[0].params, results[1].params)  # still replicas


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_ddp_with_clipping_equals_one_process_clipping_the_global_batch(small, world_size):
    """``clip``: each rank clips DDP's averaged gradient, which is the global batch's; the
    replicas stay identical and equal one process that clips (float64)."""
    clip = 0.5
    results = run_ddp(world_size, small, epochs=1, clip=clip, precision="fp64")
    steps = steps_per_epoch(len(small.train), world_size, GLOBAL_BATCH)
    reference = dict(global_batch=GLOBAL_BATCH, lr=LR, precision="fp64", steps=steps)
    expected = train_reference_ddp(world_size, small, "ci", clip=clip, **reference)
    unclipped = train_reference_ddp(world_size, small, "ci", **reference)
    assert not torch.allclose(expected, unclipped)  # the norm did pass 0.5: clipping acted
    for result in results:
        assert torch.equal(result.params, results[0].params)
        torch.testing.assert_close(result.params, expected)
