"""Whole epochs with each variant (and with accumulation) equal chapter 5's single-process
reference on DDP's global batches, in float64 whatever the one process's threads, and torch's
DDP bit for bit; records; all-reduce counts."""

import pytest
import torch

from companion.core import Data, ImageSet, load_data
from companion.ddp import train_reference_ddp
from companion.internals import internals_worker
from companion.runtime import launch
from tests.threads import at_each_thread_count

from .workers import chapter5_loop, train_several

pytestmark = pytest.mark.ch6

GLOBAL_BATCH, LR, STEPS = 48, 0.1, 15  # 601 samples: 13 steps per epoch, so epoch 2 starts
RUNS = [
    {"variant": "NaiveDDP"},
    {"variant": "HookedDDP"},
    {"variant": "BucketedDDP", "bucket_cap_mb": 0.05},
    {"variant": "BucketedDDP", "micro_batches": 3},
    {"variant": "BucketedDDP", "micro_batches": 3, "no_sync": False},
    {"variant": "torch DDP", "micro_batches": 2},
]


def test_every_variant_trains_like_one_process_on_the_global_batches(small):
    common = {
        "model": "lenet",
        "global_batch": GLOBAL_BATCH,
        "lr": LR,
        "epochs": 2,
        "max_steps": STEPS,
        "precision": "fp64",
    }
    results = launch(
        train_several, 2, small, [{**common, **run} for run in RUNS], backend="gloo", timeout=300
    )
    expected = train_reference_ddp(
        2,
        small,
        "ci",
        global_batch=GLOBAL_BATCH,
        lr=LR,
        steps=STEPS,
        model="lenet",
        precision="fp64",
    )
    for i, run in enumerate(RUNS):
        for rank in (0, 1):
            torch.testing.assert_close(
                results[rank][i].params, expected, msg=lambda m, run=run: f"{run}: {m}"
            )
        records = results[0][i].records
        assert [(r.method, r.n_devices, r.epoch, r.precision) for r in records] == [
            (run["variant"], 2, 1, "fp64"),
            (run["variant"], 2, 2, "fp64"),
        ]
        assert all(0 <= r.test_acc <= 1 and r.sec_per_epoch > 0 for r in records)
        assert results[1][i].records == []
    tensors = 10  # LeNet's parameter tensors
    counts = [results[0][i].allreduces for i in range(len(RUNS))]
    assert counts[:2] == [STEPS * tensors, STEPS * tensors]
    assert counts[2] > STEPS  # several buckets per step
    assert counts[3] == STEPS and counts[4] == 3 * STEPS  # one bucket; no_sync saves 2 of 3
    assert counts[5] is None  # torch's DDP does not count


def test_mixed_precision_buckets_train_within_the_stated_tolerance_of_fp32(small):
    """Chapter 1's precision switch in the rebuilt DDP: bf16, and fp16 whose scaled gradients the
    buckets average before the scaler unscales them. Same tolerance as chapter 1's test: 0.05 in
    mean training loss."""
    common = {
        "variant": "BucketedDDP",
        "bucket_cap_mb": 0.05,
        "model": "lenet",
        "global_batch": GLOBAL_BATCH,
        "lr": LR,
        "epochs": 2,
    }
    runs = [
        {**common, "precision": p, "channels_last": p != "fp32"} for p in ("fp32", "bf16", "fp16")
    ]
    results = launch(train_several, 2, small, runs, backend="gloo", timeout=300)
    fp32, *mixed = results[0]
    assert fp32.records[-1].precision == "fp32"
    for run, got in zip(runs[1:], mixed):
        assert got.records[-1].precision == f"{run['precision']}, channels_last"
        assert not torch.equal(got.params, fp32.params)  # the switch really changed the math
        torch.testing.assert_close(got.params, results[1][runs.index(run)].params)  # replicas agree
        assert abs(got.records[-1].train_loss - fp32.records[-1].train_loss) < 0.05


def test_chapter_5s_loop_drives_each_rebuilt_ddp_as_it_drives_torch_s(small):
    """Drop-ins: no finish() call anywhere in chapter 5's loop, and each wrapper ends where torch's
    DDP and the one-process reference end."""
    variants = ["NaiveDDP", "HookedDDP", "BucketedDDP", "torch DDP"]
    options = {
        "model": "lenet",
        "global_batch": GLOBAL_BATCH,
        "lr": LR,
        "epochs": 2,
        "max_steps": STEPS,
        "precision": "fp64",
    }
    results = launch(chapter5_loop, 2, small, variants, **options, backend="gloo", timeout=300)
    expected = train_reference_ddp(
        2,
        small,
        "ci",
        global_batch=GLOBAL_BATCH,
        lr=LR,
        steps=STEPS,
        model="lenet",
        precision="fp64",
    )
    torch_ddp = results[0][-1][0]
    for rank in (0, 1):
        for variant, (params, methods) in zip(variants, results[rank]):
            torch.testing.assert_close(params, torch_ddp, msg=lambda m, v=variant: f"{v}: {m}")
            torch.testing.assert_close(params, expected, msg=lambda m, v=variant: f"{v}: {m}")
            assert methods == ([variant, variant] if rank == 0 else [])


def test_each_variant_clips_like_one_process_that_clips(small):
    """``clip``: the step pre-hook runs after each wrapper's finish(), on the averaged
    gradient, with accumulation too (float64)."""
    clip = 0.05
    runs = [{"variant": "NaiveDDP"}, {"variant": "BucketedDDP", "micro_batches": 3}]
    common = dict(model="lenet", global_batch=GLOBAL_BATCH, lr=LR, max_steps=STEPS)
    common.update(epochs=2, precision="fp64", clip=clip)
    results = launch(
        train_several, 2, small, [{**common, **run} for run in runs], backend="gloo", timeout=300
    )
    same = dict(global_batch=GLOBAL_BATCH, lr=LR, steps=STEPS, model="lenet", precision="fp64")
    expected = train_reference_ddp(2, small, "ci", clip=clip, **same)
    assert not torch.allclose(expected, train_reference_ddp(2, small, "ci", **same))
    for i, run in enumerate(runs):
        for rank in (0, 1):
            torch.testing.assert_close(
                results[rank][i].params, expected, msg=lambda m, run=run: f"{run}: {m}"
            )


CHECKS = [  # chapter 6's check(): (variant, options); torch's DDP once per way of stepping
    ("NaiveDDP", {}),
    ("HookedDDP", {}),
    ("BucketedDDP", {"bucket_cap_mb": 0.05}),
    ("BucketedDDP", {"micro_batches": 4}),
    ("BucketedDDP", {"micro_batches": 4, "no_sync": False}),
    ("torch DDP", {}),
    ("torch DDP", {"micro_batches": 4}),
    ("torch DDP", {"micro_batches": 4, "no_sync": False}),
]


def test_in_float64_the_checks_verdicts_do_not_depend_on_the_one_process_s_threads():
    """Chapter 6's check() as the chapter runs it (the first 1,000 images, the cpu profile's
    batch of 128): each configuration launched once, in float64, equals torch's DDP stepping the
    same way bit for bit, and the one-process reference computed at 1, 2 and 4 threads with
    assert_close's float64 tolerances, with and without no_sync."""
    data = load_data("mnist-sample", verbose=False)
    part = Data(
        "the first 1,000",
        ImageSet(data.train.images[:1000], data.train.labels[:1000]),
        data.test,
        data.classes,
    )
    batch = 128
    steps = len(part.train) // batch + 5
    runs = {}
    for variant, options in CHECKS:
        runs[variant, tuple(options.items())] = launch(
            internals_worker,
            2,
            part,
            "ci",
            variant=variant,
            model="lenet",
            global_batch=batch,
            lr=LR,
            max_steps=steps,
            precision="fp64",
            channels_last=False,
            backend="gloo",
            timeout=180,
            **options,
        )
    references = at_each_thread_count(
        lambda: train_reference_ddp(
            2, part, "ci", model="lenet", global_batch=batch, lr=LR, steps=steps, precision="fp64"
        )
    )
    for (variant, options), results in runs.items():
        stepping = tuple((k, v) for k, v in options if k != "bucket_cap_mb")
        torch_ddp = runs["torch DDP", stepping][0].params
        for rank, result in enumerate(results):
            assert result.params.dtype == torch.float64
            torch.testing.assert_close(result.params, torch_ddp, rtol=0, atol=0)  # bit for bit
            for threads, expected in references.items():
                torch.testing.assert_close(
                    result.params,
                    expected,
                    msg=lambda m, t=threads: (
                        f"{variant}{dict(options)}, rank {rank}, one process at {t} thread(s): {m}"
                    ),
                )


@pytest.mark.parametrize("world_size", [1, 2])
def test_find_unused_parameters_reaches_the_wrapper(small, world_size):
    """The option went into DDPConfig and never reached BucketedDDP, which then raised
    UnusedParameters; now BucketedDDP trains as torch's DDP does (bit for bit, fp64)."""
    from .workers import unused_through_train_internals

    got = launch(
        unused_through_train_internals,
        world_size,
        small,
        ("BucketedDDP", "torch DDP"),
        backend="gloo",
        timeout=300,
    )
    for rank in got:
        torch.testing.assert_close(rank["BucketedDDP"], rank["torch DDP"], rtol=0, atol=0)
        assert rank["BucketedDDP"].dtype == torch.float64


@pytest.mark.parametrize("variant", ["NaiveDDP", "HookedDDP"])
def test_find_unused_parameters_with_a_variant_that_cannot_is_refused(variant):
    from companion.ddp import DDPConfig
    from companion.internals.training import _unused

    with pytest.raises(
        ValueError, match=rf"needs variant 'BucketedDDP' or 'torch DDP', got '{variant}'"
    ):
        _unused(variant, DDPConfig("ci", find_unused_parameters=True).resolve(2))
