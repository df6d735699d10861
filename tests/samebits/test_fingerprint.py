"""Fingerprints (chapter 11): what they see (one flipped bit anywhere, a swap, the sign of
zero), that they do not depend on the thread count, and the replicas' watch in training."""

import pytest
import torch

from companion.runtime import launch
from companion.samebits import Flip, Parted, fingerprint, same_bits_worker

pytestmark = pytest.mark.ch11


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_single_bit_flip_is_seen(dtype):
    t = torch.randn(300, dtype=dtype, generator=torch.Generator().manual_seed(0))
    ints = torch.int32 if dtype == torch.float32 else torch.int64
    before = fingerprint(t)
    for element in (0, 7, 299):
        for bit in range(8 * t.element_size()):
            flipped = t.clone()
            flipped.view(ints)[element] ^= torch.tensor(1, dtype=ints) << bit
            assert fingerprint(flipped) != before, (element, bit)
    assert fingerprint(t.clone()) == before


def test_a_swap_is_seen_where_hash_tensor_sees_none():
    t = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    swapped = t.clone()
    swapped[[3, 500]] = t[[500, 3]]
    assert fingerprint(swapped) != fingerprint(t)
    if hasattr(torch, "hash_tensor"):  # torch's: an XOR of the bits, blind to order
        assert torch.hash_tensor(swapped) == torch.hash_tensor(t)


def test_the_sign_of_zero_is_seen():
    assert fingerprint(torch.tensor([0.0, 1.0])) != fingerprint(torch.tensor([-0.0, 1.0]))


def test_the_thread_count_does_not_change_a_fingerprint():
    t = torch.randn(1_000_003, generator=torch.Generator().manual_seed(2))
    before = torch.get_num_threads()
    try:
        seen = set()
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            seen.add(int(fingerprint(t)))
    finally:
        torch.set_num_threads(before)
    assert len(seen) == 1


def test_the_watch_names_a_planted_flip_and_stays_silent_otherwise(small):
    """A flip in rank 1's exchanged gradient at step 3: the watch names step 3, the
    parameter and rank 1; the same run without it: nothing."""
    options = dict(epochs=1, global_batch=64, watch=True, backend="gloo", timeout=120)
    clean = launch(same_bits_worker, 2, small, "ci", **options)
    assert [r.parted for r in clean] == [None, None]
    flip = Flip(step=3, rank=1, parameter=2, element=5, bit=20)
    runs = launch(same_bits_worker, 2, small, "ci", flip=flip, **options)
    assert runs[0].parted == Parted(3, "3.weight", [1]) == runs[1].parted
    assert not torch.equal(runs[0].params, runs[1].params)
