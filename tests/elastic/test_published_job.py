"""Seed 003's mistakes, each reproduced and fixed: a softmax before the loss, lr times the world size
without warm-up, a download without a barrier, a TensorBoard directory deleted on restart."""

import math

import pytest
import torch

from companion.core import load_data
from companion.core.data import Data, ImageSet
from companion.elastic import (
    double_softmax,
    download_race,
    lr_without_warmup,
    restarted_logs,
    softmax_loss_floor,
)
from companion.runtime import launch

pytestmark = pytest.mark.ch8


@pytest.fixture(scope="module")
def small():
    data = load_data("mnist-sample", verbose=False)
    cut = lambda s, n: ImageSet(s.images[:n], s.labels[:n])  # noqa: E731
    return Data(data.name, cut(data.train, 1024), cut(data.test, 200), data.classes)


def test_the_loss_of_probabilities_cannot_go_below_its_floor(small):
    best = torch.nn.functional.cross_entropy(torch.eye(10)[:1], torch.tensor([0]))
    assert math.isclose(softmax_loss_floor(), best.item(), rel_tol=1e-6)
    runs = double_softmax(small, epochs=1, lr=0.1)
    logits, softmax = runs["logits"][0], runs["softmax, then CrossEntropyLoss"][0]
    assert softmax.train_loss > softmax_loss_floor() and logits.train_loss < softmax.train_loss


def test_lr_scaled_without_and_with_warm_up(small):
    runs = lr_without_warmup(small, world_size=8, steps=4, warmup_steps=2)
    (cold, cold_acc), (warm, warm_acc) = runs["no warm-up"], runs["warm-up 2 steps"]
    assert len(cold) == len(warm) == 4 and 0 <= cold_acc <= 1 and 0 <= warm_acc <= 1
    assert cold[0] == warm[0] and cold[1] != warm[1]  # same start, then smaller first steps


def test_a_download_without_a_barrier_is_read_half_written_and_the_fix(tmp_path):
    for fixed in (False, True):
        root = tmp_path / str(fixed)
        root.mkdir()
        seen = launch(download_race, 3, str(root), fixed, timeout=60)
        assert seen[0] == "whole"
        if fixed:
            assert seen[1:] == ["whole", "whole"]
        else:  # the readers ran ahead: before rank 0 created the file, or while it was
            # being written (0 bytes when they look between open() and the first flush)
            partial = {"no file", "0 of 16384 bytes", "8192 of 16384 bytes"}
            assert set(seen[1:]) <= partial, seen


def test_deleting_the_log_directory_on_restart_loses_the_first_attempt(tmp_path):
    assert restarted_logs(tmp_path / "deleted", delete=True) == list(range(21, 51))
    assert restarted_logs(tmp_path / "kept", delete=False) == list(range(1, 51))
