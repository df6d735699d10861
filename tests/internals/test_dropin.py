"""Chapter 6's wrappers as drop-ins for torch's DDP: each pattern torch's DDP allows, run under
torch's DDP and under each wrapper on the same script, at world sizes 1, 2 and 4; the wrappers
leave torch's gradients, or refuse where torch refuses (or, without find_unused_parameters,
name the unused parameter)."""

import pytest
import torch

from companion.internals.dropin import LIFETIME, WRAPPERS, dropin_table, dropin_worker, same_result
from companion.internals.dropin_cases import CASES
from companion.runtime import launch

pytestmark = pytest.mark.ch6

FIND_UNUSED = [name for name, case in CASES.items() if case[3]]  # only BucketedDDP has the option


@pytest.fixture(scope="module")
def dropin():
    return {p: launch(dropin_worker, p, backend="gloo", timeout=300) for p in (1, 2, 4)}


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("variant", WRAPPERS[1:])
@pytest.mark.parametrize("case", [*CASES, *LIFETIME])
def test_each_wrapper_leaves_torch_s_gradients_or_refuses_as_torch_does(
    dropin, world_size, variant, case
):
    for results in dropin[world_size]:
        got, want = results[case, variant], results[case, "torch DDP"]
        if case in FIND_UNUSED and variant != "BucketedDDP":
            assert isinstance(got, str), got
            assert got.startswith(f"raises UnusedParameters: {variant}: parameter(s) spare"), got
        else:
            assert same_result(got, want), (got, want)


def test_the_cases_tell_averaged_from_local_gradients(dropin):
    """The checks could fail: on 2 ranks the inputs differ, so local gradients differ from rank
    to rank, and an averaged one is the same on both."""
    local = {
        "nested no_sync",
        "require_backward_grad_sync",
        "backward through .module",
        "wrapper deleted",
    }
    ranks = dropin[2]
    for case in [*CASES, *LIFETIME]:
        want = [r[case, "torch DDP"] for r in ranks]
        if isinstance(want[0], str):
            continue
        grads = [g for g in want[0].values() if isinstance(g, torch.Tensor)]
        assert grads and any(g.abs().sum() > 0 for g in grads), case
        assert same_result(want[0], want[1]) == (case not in local), case


def test_an_accumulated_gradient_is_averaged_when_the_synced_step_does_not_use_it(dropin):
    """Issue 41's first case: torch's DDP averages a.weight's no_sync gradient; BucketedDDP used
    to write zeros over it."""
    for results in dropin[2]:
        a = results["accumulate, then unused", "BucketedDDP"]["a.weight"]
        assert a is not None and a.abs().sum() > 0


def test_the_chapter_s_table_reads_the_same_results(dropin):
    rows = dropin_table(dropin[2][0])
    assert len(rows) == len(CASES) + len(LIFETIME)
    assert not [row for row in rows if "DIFFERENT gradients" in row]
    counts = {cell for row in rows for cell in row[2:]}
    assert counts <= {
        "same gradients",
        "refuses, as torch",
        "refuses: names the unused parameter (no find_unused_parameters)",
    }
    assert all(cell == "same gradients" for row in rows for cell in row[4:] if row[1] == "runs")


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_reentrant_checkpointing_around_a_wrapper_with_a_tied_weight_averages_as_torch(
    world_size,
):
    """Issue 54, item 1: the wrapper's first pass runs under no_grad, its recomputation inside
    backward; the wrappers took that for a recomputation within a step already begun and
    left every gradient local (0.03 off at 2 ranks, on 399 of 400 numbers)."""
    import torch

    from .workers import reentrant_weight_sharing

    for out in launch(reentrant_weight_sharing, world_size, backend="gloo", timeout=300):
        for variant in WRAPPERS[1:]:
            for got, want in zip(out[variant], out["torch DDP"]):
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_a_metric_under_no_grad_inside_a_checkpointed_step_changes_nothing(world_size):
    """A pass without autograd after the step's forward is a metric, not the first pass of a
    reentrant checkpoint: the recomputation in backward begins no second step (which raised
    in the fallback and counted the samples twice with weigh_by_samples)."""
    import torch

    from .workers import metric_inside_checkpointed_step

    for out in launch(metric_inside_checkpointed_step, world_size, backend="gloo", timeout=300):
        for variant in WRAPPERS[1:]:
            for fallback in (False, True):
                plain, with_metric = out[variant, fallback, False], out[variant, fallback, True]
                assert not isinstance(with_metric, str), with_metric
                for a, b in zip(plain, with_metric):
                    torch.testing.assert_close(b, a, rtol=0, atol=0)


def _same_grads(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g is None) == (w is None), (g, w)
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_an_output_left_out_of_the_loss_is_an_unused_parameter_as_in_torch(world_size):
    """Issue 54, item 10: torch's test_output_unused_in_loss_tuple_module / _dict_module on
    gloo. An output that forward returns but the loss leaves out: BucketedDDP waited for its
    parameter's gradient (reachable from the outputs) and raised; torch's DDP counts it unused
    and leaves its .grad as it was (None stays None)."""
    from .workers import output_unused_in_loss

    for out in launch(output_unused_in_loss, world_size, backend="gloo", timeout=300):
        for module in ("tuple", "dict"):
            torch_s = out[module, "torch DDP"]
            assert torch_s[0][0] is None  # a's weight untouched by the first backward
            for step_got, step_want in zip(out[module, "BucketedDDP"], torch_s):
                _same_grads(step_got, step_want)
            if world_size == 1:
                for step_got, step_want in zip(out[module, "local"], torch_s):
                    _same_grads(step_got, step_want)


@pytest.mark.parametrize("world_size", [1, 2])
def test_undefined_gradients_stay_none_as_in_torch(world_size):
    """Issue 54, item 11: torch's test_undefined_grad_parity_unused_parameters on gloo.
    BucketedDDP wrote zeros where torch's DDP leaves None; HookedDDP, which all-reduces each
    gradient as it comes, now says it has none to send."""
    from .workers import undefined_grads

    for out in launch(undefined_grads, world_size, backend="gloo", timeout=300):
        assert all(g is None for g in out["local"])
        for variant in ("torch DDP", "NaiveDDP", "BucketedDDP"):
            _same_grads(out[variant], out["local"])
        assert out["HookedDDP"].startswith("HookedDDP: backward brought 2.")
        assert "an undefined gradient (autograd's UndefinedGrad)" in out["HookedDDP"]


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_control_flow_under_no_sync_averages_as_torch(world_size):
    """Issue 54, item 10: torch's ControlFlowToyModel (a layer used every other iteration),
    trained inside no_sync(), then synced with and without that layer."""
    from .workers import control_flow_under_no_sync

    for out in launch(control_flow_under_no_sync, world_size, backend="gloo", timeout=300):
        for last in ("random", "ones"):
            _same_grads(out[last, "BucketedDDP"], out[last, "torch DDP"])
