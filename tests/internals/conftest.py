"""The chapter-6 equivalence runs: one launch per world size, shared by the test files."""

import pytest

from companion.runtime import launch

from .workers import MICRO, every_variant, global_batches


@pytest.fixture(scope="session")
def runs():
    """``(global batches, {world size: every rank's results of every_variant})``."""
    batches = global_batches()
    return batches, {
        p: launch(every_variant, p, batches, MICRO, backend="gloo", timeout=240) for p in (1, 2, 4)
    }
