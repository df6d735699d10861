"""Two torchrun agents on one machine act as two nodes: they train together as one group of 2, and
with an elastic range (--nnodes=1:2) the job goes on alone when one node disappears."""

import pytest
import torch
from torch.testing import assert_close

from companion.elastic import agent_command, free_port, run_agents

from .conftest import TIMEOUT, assert_no_process_left, final_model, snapshot_args

pytestmark = pytest.mark.ch8


def flat(state: dict) -> torch.Tensor:
    return torch.cat([t.flatten() for t in state.values()])


def test_two_agents_train_together_like_one_node_with_two_processes(tmp_path, reference):
    path, endpoint = tmp_path / "snapshot.pt", f"127.0.0.1:{free_port()}"
    runs = run_agents(
        [agent_command("2", 1, endpoint, "two-nodes", snapshot_args(path)) for _ in range(2)],
        timeout=TIMEOUT,
    )
    for run in runs:
        run.check()
    printed = [run for run in runs if "attempt 0: 2 processes" in run.stdout]
    assert len(printed) == 1  # rank 0 is on one of the nodes, and only it reports
    assert_no_process_left(str(path))
    assert_close(final_model(path), final_model(reference[0]), rtol=0, atol=0)


def test_when_a_node_leaves_an_elastic_job_resumes_with_fewer_processes(tmp_path, reference):
    path, endpoint = tmp_path / "snapshot.pt", f"127.0.0.1:{free_port()}"
    commands = [
        agent_command("1:2", 1, endpoint, "elastic", [*snapshot_args(path), *kill], max_restarts=1)
        for kill in ([], ["--kill-after", "node:30"])
    ]
    survivor, gone = run_agents(commands, timeout=TIMEOUT)
    survivor.check()
    assert gone.returncode == -9 and "killing its agent and itself after step 30" in gone.stdout
    assert "attempt 1: 1 process, resumed from step 20 (epoch 1, position 1280)" in survivor.stdout
    assert_no_process_left(str(path))
    # the same global batches, re-sharded over one process: the same math, summed in another order,
    # so the parameters differ by rounding, which 100 steps of training amplify a little
    ours, theirs = flat(final_model(path)), flat(final_model(reference[0]))
    assert 0 < (ours - theirs).norm() / theirs.norm() < 1e-2


def test_commands_and_a_timeout_that_stops_every_agent(tmp_path):
    command = agent_command("1:2", 2, "host:29400", "job", ["--snapshot", "s.pt"], max_restarts=3)
    assert command[:8] == [
        "torchrun",
        "--nnodes=1:2",
        "--nproc-per-node=2",
        "--max-restarts=3",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=host:29400",
        "--rdzv-id=job",
        command[7],
    ] and command[8:] == ["-m", "companion.elastic", "--snapshot", "s.pt"]
    path = tmp_path / "never.pt"  # the second node never comes: the first waits at the rendezvous
    one = agent_command("2", 1, f"127.0.0.1:{free_port()}", "alone", snapshot_args(path))
    with pytest.raises(TimeoutError, match="1 agents did not finish within 3 s") as err:
        run_agents([one], timeout=3)
    assert "Their last output:\nagent 0 (stopped):" in str(err.value)
    assert_no_process_left(str(path))
    with pytest.raises(ValueError, match="nproc must be an integer >= 1"):
        agent_command("2", 0, "host:1", "job")
