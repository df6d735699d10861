"""The exercise checkers that start processes (chapters 3, 6, 7, 9, 10): the chapters' own
code passes, readers' right answers pass, wrong ones fail on the case that is wrong, and a
notebook function is refused with the fix."""

from functools import partial

import pytest

from companion.sharding import shard
from companion.slowlinks import PowerSGDState, mean_hook, powersgd_hook
from companion.study import Method
from companion_tools.exercises.collectives import check_allreduce_algorithm, check_average_gradients
from companion_tools.exercises.processes import check_prepare, hook_prepare, wrapper_prepare
from companion_tools.exercises.study import check_method

from . import answers

pytestmark = [pytest.mark.ch3, pytest.mark.ch6, pytest.mark.ch7, pytest.mark.ch9, pytest.mark.ch10]


def test_allreduce_checker_wants_the_sum_on_every_rank():
    assert check_allreduce_algorithm(answers.tree_allreduce, (3, 4), quiet=True)
    wrong = check_allreduce_algorithm(answers.reduce_without_broadcast, (3,), quiet=True)
    assert not wrong and "rank(s) [1, 2]" in wrong.cases[0][2]

    def in_a_notebook(tensor):
        return tensor

    in_a_notebook.__module__ = "__main__"
    with pytest.raises(TypeError, match="worker processes cannot import"):
        check_allreduce_algorithm(in_a_notebook)


def test_averaging_checker_wants_the_mean_and_counts_the_calls():
    flat = check_average_gradients(answers.average_flat, (2, 3), quiet=True)
    assert flat and all("1 all-reduce;" in line for line in flat.notes)
    assert check_average_gradients(answers.average_divide_first, (3,), quiet=True)
    assert not check_average_gradients(answers.sum_flat, (2,), quiet=True)


def test_prepare_checker_against_one_process_and_bit_for_bit():
    assert check_prepare(partial(wrapper_prepare, "BucketedDDP"), world_sizes=(2,), quiet=True)
    refused = check_prepare(partial(wrapper_prepare, "NaiveDDP"), world_sizes=(2,), quiet=True)
    assert "UnusedParameters" in refused.cases[0][2]  # the awkward model's unused parameter
    assert check_prepare(
        partial(wrapper_prepare, "NaiveDDP"), unused=False, world_sizes=(2,), quiet=True
    )
    zero3 = check_prepare(
        partial(shard, "ZeRO-3"), reference="ZeRO-2", world_sizes=(3,), quiet=True
    )
    assert zero3 and zero3.title.endswith("beside ZeRO-2")
    wrong = check_prepare(answers.no_average_prepare, world_sizes=(2,), quiet=True)
    assert not wrong and "rank 0" in wrong.cases[0][2]
    rank_1 = partial(hook_prepare, powersgd_hook, partial(PowerSGDState, 1))
    assert not check_prepare(rank_1, world_sizes=(2,), quiet=True)  # lossy: not one process
    assert check_prepare(
        rank_1, reference=rank_1, same_as="reference", world_sizes=(2,), quiet=True
    )
    mean = partial(hook_prepare, mean_hook, None)
    assert not check_prepare(
        rank_1, reference=mean, same_as="reference", world_sizes=(2,), quiet=True
    )
    with pytest.raises(ValueError, match="same_as"):
        check_prepare(mean, same_as="torch")


def test_method_checker_runs_a_study_method_beside_the_reference():
    fused = Method(answers.run_fused, 2, processes=False, warmup=False)
    assert check_method(fused, quiet=True)
    wrong = Method(answers.run_fused_ten_times_the_rate, 2, processes=False, warmup=False)
    assert "apart" in check_method(wrong, quiet=True).cases[0][2]
    with pytest.raises(TypeError, match="companion.study.Method"):
        check_method(answers.run_fused)
