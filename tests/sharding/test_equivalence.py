"""Each ZeRO stage by hand and both library versions equal one process on the same global
batch after several steps, at world sizes 1-4, with tied, frozen and unused parameters, a
buffer, flat sizes that do not divide by the world size and uneven local batches (float64),
whether the one process computes with 1, 2 or 4 torch threads (the verdict must not depend
on the reader's machine)."""

import pytest
import torch

from companion.runtime import launch
from companion.sharding import METHODS
from companion.sharding.verify import OPTIMIZERS, compare_worker, global_batches, one_process
from tests.threads import at_each_thread_count

pytestmark = pytest.mark.ch9


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_method_matches_one_process(world_size):
    batches = global_batches()
    runs = launch(compare_worker, world_size, batches, backend="gloo", timeout=240)
    for optimizer in OPTIMIZERS:
        references = at_each_thread_count(lambda: one_process(batches, optimizer))
        for threads, expected in references.items():
            assert not torch.allclose(expected, one_process([], optimizer))  # the steps moved it
            for method in METHODS:
                for rank, got in enumerate(runs):
                    torch.testing.assert_close(
                        got[method, optimizer],
                        expected,
                        rtol=1e-9,
                        atol=1e-12,
                        msg=lambda m: (
                            f"{method}, {optimizer}, rank {rank}/{world_size}, one "
                            f"process at {threads} thread(s): {m}"
                        ),
                    )
