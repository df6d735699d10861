"""A snapshot holds everything a resume needs, is written atomically (a writer killed mid-save
leaves the previous one loadable), and refuses what does not belong to the run."""

import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.testing import assert_close

from companion.core import get_model
from companion.elastic import (
    SnapshotError,
    check_resumable,
    describe_snapshot,
    load_snapshot,
    make_snapshot,
    restore,
    save_snapshot,
    warmup_schedule,
)
from companion.runtime import save_checkpoint

pytestmark = pytest.mark.ch8

CONFIG = {
    "model": "lenet",
    "global_batch": 64,
    "lr": 0.1,
    "seed": 0,
    "world_size": 2,
    "per_rank_batch": 32,
    "epochs": 2,
}


def trained(steps: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    net = get_model("lenet")
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    scheduler = warmup_schedule(optimizer, 5)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(torch.rand(8, 1, 28, 28)), torch.arange(8)).backward()
        optimizer.step()
        scheduler.step()
    return net, optimizer, scheduler


def test_a_saved_snapshot_restores_model_optimizer_schedule_position_and_random_numbers(tmp_path):
    net, optimizer, scheduler = trained()
    random.seed(7)
    save_snapshot(
        make_snapshot(net, optimizer, scheduler, epoch=1, position=640, step=3, config=CONFIG),
        tmp_path / "s.pt",
    )
    expected = (random.random(), torch.rand(3))
    net2, optimizer2, scheduler2 = trained(steps=0, seed=1)
    where = restore(load_snapshot(tmp_path / "s.pt"), net2, optimizer2, scheduler2)
    assert where == (1, 640, 3)
    assert_close(net2.state_dict(), net.state_dict(), rtol=0, atol=0)
    assert_close(optimizer2.state_dict(), optimizer.state_dict(), rtol=0, atol=0)
    assert scheduler2.state_dict() == scheduler.state_dict()
    assert optimizer2.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] < 0.1  # warming up
    assert (random.random(), torch.rand(3)) == (expected[0], pytest.approx(expected[1]))


def test_describe_snapshot_says_what_it_holds(tmp_path):
    snapshot = make_snapshot(*trained(), epoch=0, position=192, step=3, config=CONFIG)
    text = describe_snapshot(snapshot)
    # epochs counted from 1, as the trainer's log ("resumed from step 3 (epoch 1, position 192)")
    assert "where:     epoch 1, 192 samples into it, after 3 global steps" in text
    done = describe_snapshot(make_snapshot(*trained(), epoch=2, position=0, step=8, config=CONFIG))
    assert f"2 of {CONFIG['epochs']} epochs done" in done and "after 8 global steps" in done
    assert "rank 0's python" in text
    assert "10 momentum buffers" in text and "3 steps taken" in text
    assert f"{sum(p.numel() for p in get_model('lenet').parameters()):,} numbers" in text


def test_no_file_is_a_fresh_start_and_bad_files_are_refused(tmp_path):
    assert load_snapshot(tmp_path / "none.pt") is None
    (tmp_path / "junk.pt").write_bytes(b"not a snapshot")
    with pytest.raises(SnapshotError, match="not a readable snapshot"):
        load_snapshot(tmp_path / "junk.pt")
    save_checkpoint(get_model("lenet"), tmp_path / "model.pt")
    with pytest.raises(SnapshotError, match="a chapter 5 checkpoint holds the model only"):
        load_snapshot(tmp_path / "model.pt")
    with pytest.raises(SnapshotError, match="is a directory"):
        load_snapshot(tmp_path)


def test_another_world_size_resumes_when_the_global_batch_splits_and_is_refused_otherwise():
    snapshot = {"format": 1, "config": CONFIG}  # check_resumable refuses what is no snapshot
    for world in (1, 2, 4, 8):
        check_resumable(snapshot, {**CONFIG, "world_size": world, "per_rank_batch": 64 // world})
    with pytest.raises(SnapshotError, match="global batch 64 cannot be split over 3 processes"):
        check_resumable(snapshot, {**CONFIG, "world_size": 3, "per_rank_batch": 21})
    with pytest.raises(SnapshotError, match=r"model: 'lenet' -> 'resnet18'"):
        check_resumable(snapshot, {**CONFIG, "model": "resnet18"})
    check_resumable(snapshot, {**CONFIG, "epochs": 5})  # more epochs: the same run, longer


WRITER = """
import sys, os, signal, torch
from companion.elastic import save_snapshot
real_save = torch.save
def save_then_die(obj, f):  # half of the bytes reach the temporary file, then SIGKILL
    import io
    buf = io.BytesIO(); real_save(obj, buf)
    f.write(buf.getvalue()[: len(buf.getvalue()) // 2]); f.flush()
    open(sys.argv[2], "w").close()
    os.kill(os.getpid(), signal.SIGKILL)
torch.save = save_then_die
save_snapshot({"format": 1, "step": 2, "model": {"w": torch.ones(1000)}}, sys.argv[1])
"""


def test_a_writer_killed_during_a_save_leaves_the_previous_snapshot_loadable(tmp_path):
    path = tmp_path / "s.pt"
    save_snapshot({"format": 1, "step": 1, "model": {"w": torch.zeros(1000)}}, path)
    died = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(path), str(tmp_path / "half-written")],
        env={**os.environ},
        timeout=120,
    )
    assert died.returncode == -9 and (tmp_path / "half-written").exists()
    leftovers = list(tmp_path.glob(".s.pt.*.tmp"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # the half-written file
    assert load_snapshot(path)["step"] == 1  # the previous snapshot, whole
    save_snapshot({"format": 1, "step": 3, "model": {}}, path)
    assert load_snapshot(path)["step"] == 3 and not list(tmp_path.glob(".s.pt.*.tmp"))
