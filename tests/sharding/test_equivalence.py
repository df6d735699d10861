"""Each ZeRO stage by hand and both library versions equal one process on the same global
batch after several steps, at world sizes 1-4, with tied, frozen and unused parameters, a
buffer, flat sizes that do not divide by the world size and uneven local batches (float64)."""
import pytest
import torch

from companion.runtime import launch
from companion.sharding import METHODS

from companion.sharding.verify import OPTIMIZERS, compare_worker, global_batches, one_process

pytestmark = pytest.mark.ch9


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_method_matches_one_process(world_size):
    batches = global_batches()
    runs = launch(compare_worker, world_size, batches, backend="gloo", timeout=240)
    for optimizer in OPTIMIZERS:
        expected = one_process(batches, optimizer)
        assert not torch.allclose(expected, one_process([], optimizer))  # the steps moved it
        for method in METHODS:
            for rank, got in enumerate(runs):
                torch.testing.assert_close(
                    got[method, optimizer], expected, rtol=1e-9, atol=1e-12,
                    msg=lambda m: f"{method}, {optimizer}, rank {rank}/{world_size}: {m}")
