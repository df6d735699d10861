"""Chapter 11's training: fp32 parameters bit-identical after an epoch on 1, 2 and 4 ranks at
1, 2 and 4 threads (Adam, SGD momentum; tied, frozen and unused parameters), equal to one
process in float64 (uneven blocks, 3 ranks), and a resume on another rank count that is exact."""

import pytest
import torch
from torch import nn

from companion.core import set_seed
from companion.core.models import get_model
from companion.core.precision import MathMode
from companion.core.training import flat_params, train_step
from companion.ddp.join import OPTIMIZERS
from companion.runtime import launch
from companion.samebits import Flip, PieceLoader, same_bits_worker, train_same_bits
from tests.samebits.workers import quirky_worker

pytestmark = pytest.mark.ch11

# (ranks, threads, exchange) against 1 rank at 1 thread; 3 ranks do not divide 64
RUNS = [(1, 2, "halving"), (1, 4, "halving"), (2, 1, "halving"), (2, 2, "gather"),
        (3, 1, "halving"), (4, 1, "halving"), (4, 1, "gather")]  # fmt: skip


def _train(data, world_size, **options):
    options = dict(epochs=1, global_batch=64, backend="gloo", timeout=180) | options
    return launch(same_bits_worker, world_size, data, "ci", **options)


@pytest.mark.parametrize("optimizer", ["Adam", "SGD momentum"])
def test_fp32_parameters_are_the_same_bits_on_any_rank_and_thread_count(small, optimizer):
    first = _train(small, 1, optimizer=optimizer, threads=1)[0]
    assert first.steps == 10  # 601 samples: 9 batches of 64 and one of 25 (4 pieces)
    for world_size, threads, exchange in RUNS:
        runs = _train(small, world_size, optimizer=optimizer, threads=threads, exchange=exchange)
        for run in runs:
            assert torch.equal(run.params, first.params), (world_size, threads, exchange)


def test_ranks_that_hold_no_piece_keep_the_same_bits(small):
    """Pieces of 16: the last batch (25 samples) has 2, so 2 of 4 ranks hold none."""
    first = _train(small, 1, optimizer="Adam", piece=16)[0]
    runs = _train(small, 4, optimizer="Adam", piece=16)
    assert all(torch.equal(r.params, first.params) for r in runs)


def test_the_check_can_fail_ddp_parts_on_two_ranks(small):
    """Chapter 5's DDP on the same data: 2 ranks end elsewhere than 1 (fp32)."""
    one = _train(small, 1, way="DDP", optimizer="Adam", max_steps=5)[0]
    two = _train(small, 2, way="DDP", optimizer="Adam", max_steps=5)[0]
    assert not torch.equal(one.params, two.params)
    assert (one.params - two.params).abs().max() < 1e-3


@pytest.mark.parametrize("optimizer", ["Adam", "SGD momentum"])
@pytest.mark.parametrize("unused", [False, True])
def test_tied_frozen_and_unused_parameters_keep_the_same_bits(small, optimizer, unused):
    set_seed(0)
    net = _quirky(unused)
    start, where, at = flat_params(net), {}, 0
    for name, p in net.named_parameters():
        where[name], at = slice(at, at + p.numel()), at + p.numel()
    first = launch(quirky_worker, 1, small.train, optimizer, 1, unused, backend="gloo")[0]
    for world_size, threads in ((2, 1), (4, 1), (1, 3)):
        runs = launch(quirky_worker, world_size, small.train, optimizer, threads, unused,
                      backend="gloo", timeout=120)  # fmt: skip
        assert all(torch.equal(r, first) for r in runs), (world_size, threads)
    for name in ["frozen.weight", "frozen.bias"] + (["unused"] if unused else []):
        assert torch.equal(first[where[name]], start[where[name]])  # no gradient, no step
    assert not torch.equal(first[where["body.weight"]], start[where["body.weight"]])


def _quirky(unused):
    from companion.internals import TiedFrozenUnused

    return TiedFrozenUnused(unused)


def _one_process(data, global_batch, piece, optimizer, epochs=1):
    """Plain training on the same global batches: one step on each whole batch, float64."""
    set_seed(0)
    net = MathMode("fp64", "cpu").place(get_model("lenet"), "cpu")
    cls, options = OPTIMIZERS[optimizer]
    opt = cls(net.parameters(), **options)
    loader = PieceLoader(data.train, global_batch, piece, "cpu")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for X, y in loader:
            train_step(net, X, y, nn.CrossEntropyLoss(), opt)
    return flat_params(net)


@pytest.mark.parametrize(
    ("world_size", "global_batch", "piece"), [(2, 48, 16), (3, 48, 8), (4, 64, 8)]
)
def test_equal_to_one_process_in_float64(small, world_size, global_batch, piece):
    """2 ranks hold 1 and 2 pieces of 16, 3 ranks two of 8 each (gathered), 4 halve."""
    expected = _one_process(small, global_batch, piece, "Adam")
    runs = _train(small, world_size, optimizer="Adam", precision="fp64", global_batch=global_batch,
                  piece=piece)  # fmt: skip
    for run in runs:
        torch.testing.assert_close(run.params, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("saved_on", "resumed_on"), [(4, 2), (2, 4)])
def test_a_resume_on_another_rank_count_is_exact(small, tmp_path, saved_on, resumed_on):
    """Stopped mid-epoch (step 13 of 20), saved, resumed on another rank count: the same bits
    as the run that never stopped, data order included."""
    whole = _train(small, 1, optimizer="Adam", epochs=2)[0]
    path = str(tmp_path / "same_bits.pt")
    _train(small, saved_on, optimizer="Adam", epochs=2, max_steps=13, save=path)
    runs = _train(small, resumed_on, optimizer="Adam", epochs=2, resume=path)
    assert [r.steps for r in runs] == [20] * resumed_on
    assert all(torch.equal(r.params, whole.params) for r in runs)
    assert not torch.equal(whole.params, _train(small, 1, optimizer="Adam", epochs=2,
                                                max_steps=13)[0].params)  # fmt: skip


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (dict(way="ZeRO"), "unknown way .ZeRO.; choose one of"),
        (dict(optimizer="LBFGS"), "unknown optimizer .LBFGS."),
        (dict(exchange="ring"), "unknown exchange .ring."),
        (dict(flip=(1, 0, 0, 0, 0)), "flip must be a Flip"),
        (dict(piece=0), "piece must be an integer >= 1"),
        (dict(threads=0), "threads must be an integer >= 1"),
        (dict(per_rank_batch=16), "change the run with the rank count"),
        (dict(scale_lr=True), "change the run with the rank count"),
    ],
)
def test_bad_options_say_what_to_do(small, options, match):
    with pytest.raises((ValueError, TypeError), match=match):
        train_same_bits(small, "ci", **options)


def test_batchnorm_and_autocast_are_refused_with_the_reason(small):
    with pytest.raises(Exception, match="BatchNorm, which normalises each piece"):
        _train(small, 1, model="lenet-bn")
    with pytest.raises(Exception, match="fp32 or fp64 only"):
        _train(small, 1, precision="bf16")
    with pytest.raises(Exception, match="resume= and flip= need way='pieces'"):
        _train(small, 1, way="DDP", resume="nowhere.pt")
    with pytest.raises(Exception, match="resume= and flip= need way='pieces'"):
        _train(small, 1, way="DDP", flip=Flip(1, 0, 0, 0, 0))
    with pytest.raises(Exception, match="no checkpoint at 'nowhere.pt'"):
        _train(small, 1, resume="nowhere.pt")


def test_a_resume_with_another_layout_or_nothing_left_is_refused(small, tmp_path):
    path = str(tmp_path / "same_bits.pt")
    _train(small, 2, optimizer="Adam", max_steps=4, save=path)
    with pytest.raises(Exception, match=r"saved with piece 8 \(now 16\)"):
        _train(small, 2, optimizer="Adam", piece=16, resume=path)
    with pytest.raises(Exception, match="optimizer 'Adam' \\(now 'SGD momentum'\\)"):
        _train(small, 2, optimizer="SGD momentum", resume=path)
    with pytest.raises(Exception, match="at step 4, max_steps=3: nothing to train"):
        _train(small, 2, optimizer="Adam", max_steps=3, resume=path)
    with pytest.raises(Exception, match="outside lenet's trainable parameters"):
        _train(small, 2, flip=Flip(1, 0, 10, 0, 0))
