"""Chapter 11's checker: the chapter's fingerprint passes; weaker ones fail the cases they
should, with the reason, and an answer that raises fails without stopping the checker."""

import pytest
import torch

from companion.samebits import fingerprint
from companion_tools.exercises.samebits import check_fingerprint

pytestmark = pytest.mark.ch11


def test_the_chapter_s_fingerprint_passes():
    assert check_fingerprint(fingerprint, quiet=True)


def test_a_sum_of_values_and_an_xor_fail_what_they_cannot_see():
    summed = check_fingerprint(lambda t: t.sum(), quiet=True)
    assert "-0.0 and +0.0 are told apart" in summed.failed
    assert "float32: every one-bit flip is seen" in summed.failed

    def xor(t):
        ints = t.reshape(-1).view(torch.int32 if t.element_size() == 4 else torch.int64)
        out = ints[0].clone()
        for v in ints[1:]:
            out ^= v
        return out

    failed = check_fingerprint(xor, quiet=True).failed
    assert failed == [
        "float32: two elements that trade places are seen",
        "float32: a value and its negative that trade places are seen",
        "float64: two elements that trade places are seen",
        "float64: a value and its negative that trade places are seen",
    ]


def test_whole_64_bit_elements_times_odd_weights_miss_a_sign_swap_in_fp64():
    """The chapter's first fingerprint weighed whole fp64 elements: a value and its negative
    differ by 2^63 in their bits, and two odd weights by an even number."""
    from companion.samebits.fingerprint import _weights

    def whole(t):
        bits = t.reshape(-1).view(torch.int32 if t.element_size() == 4 else torch.int64)
        return (bits.to(torch.int64) * _weights(bits.numel(), bits.device)).sum()

    failed = check_fingerprint(whole, quiet=True).failed
    assert failed == ["float64: a value and its negative that trade places are seen"]


def test_an_answer_that_raises_fails_its_cases_with_the_error(capsys):
    def broken(t):
        raise RuntimeError("not written yet")

    verdicts = check_fingerprint(broken)
    assert not verdicts and "raised RuntimeError: not written yet" in capsys.readouterr().out
    with pytest.raises(TypeError, match="needs your fingerprint function"):
        check_fingerprint("fingerprint")
