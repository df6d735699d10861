"""Chapter 10's exact claims at world sizes 1-4, on chapter 6's awkward model (tied, frozen
and unused parameters, a buffer) in float64 with uneven local batches:

* the hand-written hooks (mean, fp16, bf16) equal torch's, bit for bit, and the mean equals
  one process;
* PowerSGD at full rank equals one process (up to float64 rounding);
* local SGD with period 1 equals one process, with plain SGD and with momentum and weight
  decay (all linear), and equals torch's PostLocalSGDOptimizer at period 3;
* DiLoCo with inner SGD, period 1 and an outer SGD of lr 1 without momentum equals one
  process.

Each reference is computed at 1, 2 and 4 torch threads: the verdict must not depend on the
reader's machine."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding.verify import global_batches, one_process
from companion.slowlinks.verify import (
    SGD,
    drift_worker,
    error_feedback_worker,
    hooks_worker,
    periodic_worker,
    powersgd_worker,
    torch_powersgd_worker,
)
from tests.threads import at_each_thread_count

pytestmark = pytest.mark.ch10
WORLDS = [1, 2, 3, 4]


def close(got, expected, what):
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12, msg=lambda m: f"{what}: {m}")


def references(batches, optimizer):
    return at_each_thread_count(lambda: one_process(batches, SGD[optimizer]))


@pytest.mark.parametrize("world_size", WORLDS)
def test_hooks_equal_torchs_and_the_mean_equals_one_process(world_size):
    batches = global_batches()
    runs = launch(hooks_worker, world_size, batches, backend="gloo", timeout=240)
    for rank, got in enumerate(runs):
        for name in ("mean", "fp16", "bf16"):
            assert torch.equal(got[name, "ours"], got[name, "torch"]), (name, rank)
            assert torch.equal(got[name, "ours"], runs[0][name, "ours"]), (name, rank)
        for threads, expected in references(batches, "SGD").items():
            close(got["mean", "ours"], expected, f"mean hook, rank {rank}, {threads} threads")
    expected = one_process(batches, SGD["SGD"])
    for name, bits in (("fp16", 11), ("bf16", 8)):  # rounded, so near but not equal
        error = (runs[0][name, "ours"] - expected).abs().max()
        assert 0 < error < 2.0**-bits, (name, float(error))


@pytest.mark.parametrize("world_size", WORLDS)
def test_powersgd_at_full_rank_is_the_mean(world_size):
    batches = global_batches()
    runs = launch(powersgd_worker, world_size, batches, backend="gloo", timeout=240)
    for threads, expected in references(batches, "SGD").items():
        for rank, got in enumerate(runs):
            close(got, expected, f"PowerSGD at full rank, rank {rank}, {threads} threads")


@pytest.mark.parametrize("world_size", WORLDS)
def test_local_sgd_and_diloco_reduce_to_one_process(world_size):
    batches = global_batches()
    runs = launch(periodic_worker, world_size, batches, backend="gloo", timeout=240)
    for optimizer in SGD:
        for threads, expected in references(batches, optimizer).items():
            for rank, got in enumerate(runs):
                close(
                    got["local SGD", optimizer],
                    expected,
                    f"local SGD period 1, {optimizer}, rank {rank}, {threads} threads",
                )
                if optimizer == "SGD":
                    close(
                        got["DiLoCo", "SGD"],
                        expected,
                        f"DiLoCo reduced, rank {rank}, {threads} threads",
                    )


@pytest.mark.parametrize("world_size", [2, 3])
def test_local_sgd_equals_torchs_post_local_sgd(world_size):
    """Bit for bit at 2 ranks. At 3, torch packs only the parameters that have a gradient
    (the unused one has none), and gloo sums each element in an order that depends on its
    place in the packed buffer: equal up to float64 rounding."""
    batches = global_batches(7)  # meetings after steps 3 and 6, then one local step
    runs = launch(periodic_worker, world_size, batches, period=3, backend="gloo", timeout=240)
    for optimizer in SGD:
        for rank, got in enumerate(runs):
            ours, theirs = got["local SGD", optimizer], got["torch local SGD", optimizer]
            close(ours, theirs, f"{optimizer}, rank {rank}")
            assert torch.equal(ours, theirs) or world_size == 3
        assert not torch.equal(runs[0]["local SGD", optimizer], runs[1]["local SGD", optimizer])


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_error_feedback_makes_powersgd_unbiased(world_size):
    """A fixed gradient of rank > 1 sent at rank 1: with error feedback the mean of the
    updates converges to the true gradient (the error left over stays bounded); without it,
    it converges to the best rank-1 approximation and stays away."""
    with_ef = launch(error_feedback_worker, world_size, backend="gloo", timeout=240)[0]
    without = launch(
        error_feedback_worker, world_size, error_feedback=False, backend="gloo", timeout=240
    )[0]
    assert with_ef[-1] < 0.1 and with_ef[-1] < with_ef[7] / 4, with_ef[::8]
    assert min(without[32:]) > 0.3, without[::8]


@pytest.mark.parametrize("world_size", [2, 3])
def test_powersgd_sends_what_torchs_sends(world_size):
    """The same tensors compressed, the same factors' sizes: the same bytes per step as
    torch's powerSGD_hook at ranks 1 and 4. The parameters come out near, not equal: the
    random start of Q and the orthonormalisation (QR, Gram-Schmidt) differ."""
    for rank_r in (1, 4):
        runs = launch(
            torch_powersgd_worker,
            world_size,
            global_batches(6),
            rank_r=rank_r,
            backend="gloo",
            timeout=240,
        )
        for got in runs:
            (ours, ours_sent), (theirs, theirs_sent) = got["ours"], got["torch"]
            assert ours_sent == theirs_sent
            assert 0 < float((ours - theirs).norm() / theirs.norm()) < 0.05


def test_local_sgd_replicas_drift_between_meetings_and_agree_at_each():
    """Chapter 5's detector, fired on purpose: out of sync after each local step, in sync
    (bit for bit) after each meeting."""
    seen = launch(drift_worker, 3, global_batches(8), period=4, backend="gloo", timeout=240)[0]
    assert [in_sync for _, in_sync, _ in seen] == [False, False, False, True] * 2
    assert all((spread == 0) == in_sync and spread < 1 for _, in_sync, spread in seen)


def ledger_of_hand_written_allreduces(rank, world_size):
    from companion.collectives import ALLREDUCES
    from companion.sharding.ledger import count_bytes

    out = {}
    for name in ("naive", "ring", "pipelined ring", "recursive doubling"):
        with count_bytes() as ledger:
            ALLREDUCES[name](torch.ones(1000))
        out[name] = (ledger.counts(), ledger.sent())
    return out


def test_the_ledger_counts_chapter_3s_point_to_point_all_reduces():
    """A ring all-reduce of B bytes on N ranks: each rank sends 2 (N - 1) messages of B / N
    bytes (uneven chunks aside), counted as sends, with nothing left uncounted."""
    runs = launch(ledger_of_hand_written_allreduces, 4, backend="gloo", timeout=120)
    counts, sent = runs[1]["ring"]
    assert counts == {"send": 6} and sent == 6 * 1000
    for name, (counts, sent) in runs[1].items():
        assert set(counts) == {"send"} and sent > 0, name


def test_torchs_powersgd_hook_can_run_on_a_cpu_rank_of_a_gpu_machine(monkeypatch):
    """torch's hook calls torch.cuda.synchronize(bucket's device) whenever CUDA is available,
    which raises for a CPU bucket; the worker makes that call do nothing on a CPU rank only."""
    from companion.slowlinks.verify import _no_cuda_sync_for_cpu

    def refuse(device=None):
        raise ValueError(f"Expected a cuda device, but got: {device}")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", refuse)
    with _no_cuda_sync_for_cpu(torch.device("cpu")):
        torch.cuda.synchronize(torch.device("cpu"))  # what torch's decompress does
    with pytest.raises(ValueError, match="Expected a cuda device"):  # restored after
        torch.cuda.synchronize(torch.device("cpu"))
    with _no_cuda_sync_for_cpu(torch.device("cuda", 0)):  # a GPU rank keeps its real sync
        assert torch.cuda.synchronize is refuse
