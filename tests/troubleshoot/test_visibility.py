"""CUDA_VISIBLE_DEVICES: the renumbering rule, and what a fresh process sees."""

import pytest
import torch

from companion.troubleshoot.visibility import cuda_view, visible_devices

pytestmark = pytest.mark.ch8


def test_listed_gpus_are_renumbered_from_zero_in_the_listed_order():
    assert visible_devices("2,3", 4) == {0: 2, 1: 3}
    assert visible_devices("3,1", 4) == {0: 3, 1: 1}
    assert visible_devices(None, 2) == {0: 0, 1: 1}


def test_an_invalid_index_ends_the_list_and_an_empty_value_hides_all():
    assert visible_devices("0,7,1", 2) == {0: 0}
    assert visible_devices("", 2) == {}
    assert visible_devices("-1", 2) == {}


def test_what_is_not_modelled_is_refused():
    with pytest.raises(ValueError, match="listed twice"):
        visible_devices("0,0", 2)
    with pytest.raises(ValueError, match="UUID"):
        visible_devices("GPU-8f3", 2)
    with pytest.raises(TypeError):
        visible_devices(1, 2)


def test_an_empty_value_hides_every_gpu_from_a_new_process():
    assert cuda_view("") == {"count": 0, "names": [], "uuids": []}


@pytest.mark.gpu
def test_a_new_process_sees_the_gpus_the_rule_predicts():
    n = torch.cuda.device_count()
    everything = cuda_view(None)
    assert everything["count"] == n
    last = cuda_view(str(n - 1))
    assert last["count"] == 1 and last["uuids"] == [everything["uuids"][n - 1]]
    assert cuda_view(f"0,{n}")["count"] == len(visible_devices(f"0,{n}", n)) == 1
