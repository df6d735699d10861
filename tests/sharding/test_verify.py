"""Chapter 9's check (companion.sharding.verify) as the chapter runs it, on 2 and 3 processes:
every method, launched once per world size, equals one process at the chapter's float64
tolerance whether that process computes with 1, 2 or 4 threads."""
import pytest
import torch

from companion.runtime import launch
from companion.sharding import METHODS
from companion.sharding.verify import OPTIMIZERS, compare_worker, global_batches, one_process
from tests.threads import at_each_thread_count

pytestmark = pytest.mark.ch9


@pytest.mark.parametrize("world_size", [2, 3])
def test_in_float64_the_verdict_does_not_depend_on_the_one_process_s_threads(world_size):
    batches = global_batches()
    runs = launch(compare_worker, world_size, batches, backend="gloo", timeout=240)
    for optimizer in OPTIMIZERS:
        references = at_each_thread_count(lambda: one_process(batches, optimizer))
        for threads, expected in references.items():
            for method in METHODS:
                for rank, got in enumerate(runs):
                    torch.testing.assert_close(
                        got[method, optimizer], expected, rtol=1e-9, atol=1e-12,
                        msg=lambda m: f"{method}, {optimizer}, rank {rank}/{world_size}, one "
                                      f"process at {threads} thread(s): {m}")
