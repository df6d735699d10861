"""Kill and resume under torchrun: a worker killed mid-epoch, the group restarted, training resumed
from the last snapshot to the very parameters of an uninterrupted run; and, in one process, what a
resume restores and which snapshots it refuses."""

import logging
import re

import pytest
import torch
import torch.distributed as dist
from torch.testing import assert_close

from companion.core import load_data
from companion.ddp import DDPConfig
from companion.elastic import (
    ElasticOptions,
    SnapshotError,
    describe_snapshot,
    run_agents,
    standalone_command,
    train_elastic,
)
from companion.runtime import read_scalars
from companion.sharding.snapshot import ELASTIC_METHODS, load_sharded_snapshot

from .conftest import TIMEOUT, assert_no_process_left, final_model, snapshot_args

pytestmark = pytest.mark.ch8


def quiet_read_scalars(log_dir):
    logger = logging.getLogger("tensorboard")  # it warns when it purges steps: expected here
    level, logger.level = logger.level, logging.ERROR
    try:
        return read_scalars(log_dir)
    finally:
        logger.setLevel(level)


def test_a_worker_killed_mid_epoch_resumes_to_the_uninterrupted_parameters(tmp_path, reference):
    path = tmp_path / "snapshot.pt"
    logs = tmp_path / "logs"
    argv = [*snapshot_args(path), "--log-dir", str(logs), "--kill-after", "1:30"]
    [run] = run_agents([standalone_command(2, argv, max_restarts=1)], timeout=TIMEOUT)
    run.check()
    lines = [line for line in run.stdout.splitlines() if not line.startswith("step ")]
    assert "rank 1: killed with SIGKILL after step 30" in lines
    assert "attempt 1: 2 processes, resumed from step 20 (epoch 1, position 1280)" in lines
    assert_no_process_left(str(path))
    assert_close(final_model(path), final_model(reference[0]), rtol=0, atol=0)
    # steps 21..30 ran twice, with the same losses; the rest once, as in the reference
    losses = re.findall(r"^step (\d+) loss (\S+)$", run.stdout, re.MULTILINE)
    assert [int(s) for s, _ in losses] == [*range(1, 31), *range(21, 127)]
    assert losses[20:30] == losses[30:40]
    logged = quiet_read_scalars(logs)["train/loss"]  # the replayed steps purged: each step once
    assert [step for step, _ in logged] == list(range(1, 127))
    assert dict(losses) == dict(re.findall(r"^step (\d+) loss (\S+)$", reference[1], re.MULTILINE))


@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def small_data():
    data = load_data("mnist-sample", verbose=False)
    data.train.images, data.train.labels = data.train.images[:640], data.train.labels[:640]
    data.test.images, data.test.labels = data.test.images[:100], data.test.labels[:100]
    return data


def test_a_resume_in_one_process_restores_everything(one_process_group, tmp_path):
    data, cfg = small_data(), DDPConfig("ci", epochs=2, global_batch=64)
    whole = train_elastic(data, cfg, ElasticOptions(str(tmp_path / "a.pt"), snapshot_every=4))
    opts = ElasticOptions(str(tmp_path / "b.pt"), snapshot_every=4)
    stopped = train_elastic(data, DDPConfig("ci", epochs=2, global_batch=64, max_steps=7), opts)
    assert stopped.losses[-1][0] == 7 and torch.load(opts.snapshot, weights_only=True)["step"] == 4
    resumed = train_elastic(data, cfg, opts)  # from step 4: steps 5-7 again, then the rest
    assert resumed.resumed_from == 4 and resumed.losses[:3] == stopped.losses[4:]
    assert_close(resumed.params, whole.params, rtol=0, atol=0)
    snapshot = torch.load(tmp_path / "b.pt", weights_only=True)
    assert (snapshot["epoch"], snapshot["position"], snapshot["step"]) == (2, 0, 20)
    assert snapshot["scheduler"]["last_epoch"] == 20
    assert all(s["momentum_buffer"] is not None for s in snapshot["optimizer"]["state"].values())


def test_another_runs_snapshot_is_refused(one_process_group, tmp_path):
    data, opts = small_data(), ElasticOptions(str(tmp_path / "s.pt"), snapshot_every=4)
    train_elastic(data, DDPConfig("ci", epochs=1, global_batch=64, max_steps=5), opts)
    with pytest.raises(SnapshotError, match=r"another run \(lr: 0.01 -> 0.05\); run with the same"):
        train_elastic(data, DDPConfig("ci", epochs=1, global_batch=64, lr=0.05), opts)
    with pytest.raises(SnapshotError, match=r"global_batch: 64 -> 32"):
        train_elastic(data, DDPConfig("ci", epochs=1, global_batch=32), opts)
    with pytest.raises(SnapshotError, match=r"another run \(clip: None -> 1\.0\)"):
        train_elastic(data, DDPConfig("ci", epochs=1, global_batch=64, clip=1.0), opts)


@pytest.mark.parametrize("method", ["FSDP2", "ZeRO-3"])
def test_a_sharded_resume_in_one_process_restores_everything(one_process_group, tmp_path, method):
    data, cfg = small_data(), DDPConfig("ci", epochs=2, global_batch=64)
    sharded = ELASTIC_METHODS[method]
    whole = train_elastic(data, cfg, ElasticOptions(str(tmp_path / "a"), 4, method=sharded))
    opts = ElasticOptions(str(tmp_path / "b"), 4, method=sharded)
    stopped = train_elastic(data, DDPConfig("ci", epochs=2, global_batch=64, max_steps=7), opts)
    assert stopped.losses[-1][0] == 7 and load_sharded_snapshot(opts.snapshot)["step"] == 4
    resumed = train_elastic(data, cfg, opts)  # the shards of step 4 read back by DCP
    assert resumed.resumed_from == 4 and resumed.losses[:3] == stopped.losses[4:]
    assert_close(resumed.params, whole.params, rtol=0, atol=0)
    snapshot = load_sharded_snapshot(opts.snapshot)
    assert (snapshot["epoch"], snapshot["step"], snapshot["sharded"]) == (2, 20, opts.snapshot)
    assert "model:     in shards, 1 DCP file(s)" in describe_snapshot(snapshot)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no .partial left
    with pytest.raises(SnapshotError, match=r"is a directory; give the snapshot's file name"):
        train_elastic(data, cfg, ElasticOptions(opts.snapshot, 4))  # DDP on FSDP2's snapshot
    other = "ZeRO-3" if method == "FSDP2" else "FSDP2"
    with pytest.raises(SnapshotError, match=rf"another run \(sharded: '{method}' -> '{other}'\)"):
        train_elastic(data, cfg, ElasticOptions(opts.snapshot, 4, method=ELASTIC_METHODS[other]))


# A worker killed under torchrun while sharded (FSDP2, ZeRO-3), resumed to the uninterrupted run's
# parameters bit for bit, is chapter 9's kill-and-resume cell: nbval (make test) compares its
# output, "(10 tensors) / (5 tensors) equal the uninterrupted run's: True", the resumed step and
# the exit codes. It was a test here too, the same two runs twice in CI (about 160 s).
