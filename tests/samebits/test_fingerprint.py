"""Fingerprints (chapter 11): what they see (one flipped bit anywhere, a swap, the sign of
zero), that they do not depend on the thread count, and the replicas' watch in training."""

import pytest
import torch

from companion.runtime import launch
from companion.samebits import Flip, Parted, fingerprint, same_bits_worker
from companion.samebits.fingerprint import _outvoted

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


def test_fp64_words_leave_no_blind_spot_at_the_sign_bit():
    """Weights are odd, so two 64-bit elements' weights differ by an even number: a sign's
    bit (2^63) times it would vanish mod 2^64. Fingerprinted as 32-bit words, a value and its
    negative that trade places, and two sign flips, are seen."""
    t = torch.randn(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    t[500] = -t[3]
    swapped, signs = t.clone(), t.clone()
    swapped[[3, 500]] = t[[500, 3]]
    signs[[10, 20]] = -t[[10, 20]]
    assert fingerprint(swapped) != fingerprint(t) and fingerprint(signs) != fingerprint(t)


def test_outvoted_names_the_minority_or_everyone():
    assert _outvoted([5, 5, 7]) == [2] and _outvoted([7, 5, 5, 5]) == [0]
    assert _outvoted([5, 7]) == [0, 1] and _outvoted([5, 5, 7, 7]) == [0, 1, 2, 3]


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
    """A flip in rank 0's exchanged gradient at step 3 of 3 ranks: the watch names step 3,
    the parameter and rank 0 (outvoted); on 2 ranks it cannot tell which, and names both;
    the same runs without it, and chapter 5's DDP: nothing."""
    options = dict(epochs=1, watch=True, backend="gloo", timeout=120)
    for way, batch in (("pieces", 64), ("DDP", 48)):  # DDP: a share per rank, 3 x 16
        clean = launch(same_bits_worker, 3, small, "ci", way=way, global_batch=batch, **options)
        assert [r.parted for r in clean] == [None] * 3
    options["global_batch"] = 64
    flip = Flip(step=3, rank=0, parameter=2, element=5, bit=20)
    runs = launch(same_bits_worker, 3, small, "ci", flip=flip, **options)
    assert all(r.parted == Parted(3, "3.weight", [0]) for r in runs)
    assert torch.equal(runs[1].params, runs[2].params)
    assert not torch.equal(runs[0].params, runs[1].params)
    two = launch(same_bits_worker, 2, small, "ci", flip=flip._replace(rank=1), **options)
    assert two[0].parted == Parted(3, "3.weight", [0, 1])
