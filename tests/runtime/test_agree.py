"""check_ranks_agree: one all_gather_object at construction; every rank gets the same error,
naming the rank and the parameter or setting that differs, instead of a hang or an abort."""

import pytest
import torch
from torch import nn

from companion.internals import BucketedDDP, HookedDDP, NaiveDDP
from companion.runtime import RanksDisagree, check_ranks_agree, describe_replica, launch

pytestmark = pytest.mark.ch6

WRAPPERS = {"NaiveDDP": NaiveDDP, "HookedDDP": HookedDDP, "BucketedDDP": BucketedDDP}


def model(rank: int, case: str, odd: int) -> nn.Module:
    """The same small model on every rank, except on rank ``odd`` for ``case``."""
    torch.manual_seed(0)
    layers = [nn.Linear(4, 5 if case == "shape" and rank == odd else 3), nn.ReLU(), nn.Linear(3, 2)]
    if case == "shape" and rank == odd:
        layers[2] = nn.Linear(5, 2)
    if case == "layer" and rank == odd:
        layers.append(nn.Linear(2, 2))  # one more layer on one rank
    return nn.Sequential(*layers)


def build_each(rank: int, world_size: int, odd: int) -> dict:
    """Worker: for each (case, wrapper), the error's text, or 'agree' when construction passed."""
    seen = {}
    for case in ("same", "layer", "shape", "cap"):
        for name, cls in WRAPPERS.items():
            if case == "cap" and name != "BucketedDDP":
                continue
            options = {"bucket_cap_mb": 1.0 if rank == odd else 25.0} if case == "cap" else {}
            try:
                cls(model(rank, case, odd), **options)
                seen[case, name] = "agree"
            except RanksDisagree as err:
                seen[case, name] = str(err)
    from companion.sharding import Zero1, Zero2, Zero3  # chapter 9's sharded optimizers

    for name, cls in (("Zero1", Zero1), ("Zero2", Zero2), ("Zero3", Zero3)):
        for case, lr in (("same", 0.1), ("layer", 0.1), ("lr", 0.2 if rank == odd else 0.1)):
            try:
                cls(
                    model(rank, "layer" if case == "layer" else "same", odd), torch.optim.SGD, lr=lr
                )
                seen[case, name] = "agree"
            except RanksDisagree as err:
                seen[case, name] = str(err)
    for name, cls, setting in (
        ("Zero2", Zero2, {"bucket_cap_mb": 1.0 if rank == odd else 25.0}),
        ("Zero3", Zero3, {"prefetch": rank == odd}),
    ):
        try:  # a stage's own setting (gloo aborted both workers on a Zero2 cap that differed)
            cls(model(rank, "same", odd), torch.optim.SGD, lr=0.1, **setting)
            seen["own", name] = "agree"
        except RanksDisagree as err:
            seen["own", name] = str(err)
    try:
        check_ranks_agree(nn.Linear(2, 2), {"seed": rank}, "ShardedWrapper")
    except RanksDisagree as err:
        seen["settings", "check_ranks_agree"] = str(err)
    return seen


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_rank_names_the_rank_and_what_differs(world_size):
    odd = world_size - 1
    results = launch(build_each, world_size, odd, backend="gloo", timeout=240)
    assert all(r == results[0] for r in results), "every rank raises the same error"
    seen = results[0]
    assert {seen["same", n] for n in WRAPPERS} == {"agree"}
    for name in WRAPPERS:
        assert seen["layer", name].startswith(f"{name}: rank {odd} differs from rank 0: ")
        assert f"rank {odd} has parameter '3.weight', rank 0 has not" in seen["layer", name]
        assert (
            "parameter '0.weight' is shape [3, 4], float32, requires_grad on rank 0 but "
            f"shape [5, 4], float32, requires_grad on rank {odd}" in seen["shape", name]
        )
    assert (
        f"setting 'bucket_cap_mb' is 25.0 on rank 0 but 1.0 on rank {odd}"
        in seen["cap", "BucketedDDP"]
    )
    for name in ("Zero1", "Zero2", "Zero3"):
        assert seen["same", name] == "agree"
        assert seen["layer", name].startswith(f"{name}: rank {odd} differs from rank 0: ")
        assert f"setting 'lr' is 0.1 on rank 0 but 0.2 on rank {odd}" in seen["lr", name]
    assert (
        f"setting 'bucket_cap_mb' is 25.0 on rank 0 but 1.0 on rank {odd}" in seen["own", "Zero2"]
    )
    assert f"setting 'prefetch' is False on rank 0 but True on rank {odd}" in seen["own", "Zero3"]
    assert seen["settings", "check_ranks_agree"].startswith("ShardedWrapper: rank 1 differs")
    assert "setting 'seed' is 0 on rank 0 but 1 on rank 1" in seen["settings", "check_ranks_agree"]


def test_the_description_holds_names_shapes_dtypes_and_settings():
    net = nn.Linear(3, 2)
    net.bias.requires_grad_(False)
    d = describe_replica(net, {"bucket_cap_mb": 25.0})
    assert d["parameter"] == {
        "weight": ((2, 3), "torch.float32", True),
        "bias": ((2,), "torch.float32", False),
    }
    assert d["setting"] == {"bucket_cap_mb": "25.0"}


def test_bad_arguments_are_refused_before_any_collective():
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        check_ranks_agree("net")
    with pytest.raises(TypeError, match="settings must be a dict of the wrapper's settings"):
        check_ranks_agree(nn.Linear(2, 2), [("bucket_cap_mb", 25)])
    with pytest.raises(RuntimeError, match="needs a process group"):
        check_ranks_agree(nn.Linear(2, 2))
