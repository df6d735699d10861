"""Chapter 3: check_allreduce passes the hand-written all-reduces and catches a wrong one."""

import pytest
import torch

from companion.collectives import check_allreduce
from companion.runtime import WorkerError, launch
from tests.collectives.workers import off_by_one_allreduce

pytestmark = pytest.mark.ch3


def test_check_allreduce_catches_a_wrong_sum():
    algorithms = {"off by one": off_by_one_allreduce}
    with pytest.raises(WorkerError, match="off by one"):
        launch(check_allreduce, 2, (7,), (torch.float64,), algorithms=algorithms, timeout=60)


def test_check_allreduce_reports_one_row_per_case():
    rows = launch(check_allreduce, 2, (1, 7), (torch.float32,), timeout=60)[0]
    assert {(name, numel) for name, numel, _, _ in rows} == {
        (name, numel)
        for name in ("naive", "ring", "pipelined ring", "recursive doubling")
        for numel in (1, 7)
    }
