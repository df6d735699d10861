"""The chapter-9 measurements: one launch per world size, shared by the ledger and memory tests."""

import pytest

from companion.runtime import launch
from companion.sharding.measure import state_worker


@pytest.fixture(scope="session")
def measured():
    """``{world size: every rank's {method: calls, state, peak, psi}}`` of one fp32 step."""
    return {n: launch(state_worker, n, backend="gloo", timeout=240) for n in (1, 2, 3, 4)}
