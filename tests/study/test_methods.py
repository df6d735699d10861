import pytest
import torch

from companion.core.data import load_mnist_sample
from companion.study.driver import subset
from companion.study.methods import METHODS, RunSpec, register, run_method

pytestmark = pytest.mark.ch7


@pytest.fixture(scope="module")
def data():
    return subset(load_mnist_sample(), 256, 64)


def test_registry_holds_chapters_2_to_6():
    names = ("split", "allreduce", "dataparallel", "ddp", "internals")
    assert [METHODS[m].chapter for m in names] == [2, 3, 4, 5, 6]


def test_chapter_6_rebuild_trains_like_chapter_5_ddp(data):
    """Same sampler, loader and seed: the rebuilt DDP and torch's DDP give the same losses."""
    spec = RunSpec(data, "lenet", 2, 64, 0.1, 1, profile="ci")
    ddp, mine = run_method("ddp", spec), run_method("internals", spec)
    assert [r.method for r in mine] == ["internals"] and mine[0].n_devices == 2
    torch.testing.assert_close(mine[0].train_loss, ddp[0].train_loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mine[0].test_acc, ddp[0].test_acc, rtol=0, atol=1e-9)


def test_chapter_9_sharded_methods_join_the_study_and_train_like_ddp(data):
    """ZeRO-3 and FSDP2 through the study's runner: chapter 9's methods, the same losses as DDP."""
    assert (METHODS["zero3"].chapter, METHODS["fsdp2"].chapter) == (9, 9)
    spec = RunSpec(data, "lenet", 2, 64, 0.1, 1, profile="ci")
    ddp = run_method("ddp", spec)
    for name in ("zero3", "fsdp2"):
        records = run_method(name, spec)
        assert [r.method for r in records] == [name] and records[0].precision == "fp32"
        torch.testing.assert_close(records[0].train_loss, ddp[0].train_loss, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(records[0].test_acc, ddp[0].test_acc, rtol=0, atol=1e-9)


def test_chapter_10_methods_join_the_study(data):
    """PowerSGD, local SGD and DiLoCo through the study's runner: records under their names."""
    assert [METHODS[m].chapter for m in ("powersgd", "localsgd", "diloco")] == [10, 10, 10]
    spec = RunSpec(data, "lenet", 2, 64, 0.1, 1, profile="ci")
    for name in ("powersgd", "localsgd", "diloco"):
        records = run_method(name, spec)
        assert [r.method for r in records] == [name] and records[0].n_devices == 2
        assert 0 < records[0].train_loss < 3 and 0 <= records[0].test_acc <= 1


def test_register_is_one_line_and_checks(data):
    def fake(spec):
        return run_method("reference", spec)

    register("test-fake", fake, chapter=6)
    try:
        records = run_method("test-fake", RunSpec(data, "lenet", 1, 64, 0.1, 1, profile="ci"))
        assert [r.method for r in records] == ["test-fake"]
        with pytest.raises(ValueError, match="no per-step learning-rate schedule"):
            run_method(
                "test-fake", RunSpec(data, "lenet", 2, 64, 0.2, 1, base_lr=0.1, lr_rule="warmup")
            )
    finally:
        del METHODS["test-fake"]
    with pytest.raises(TypeError):
        register("bad", 3, chapter=1)


def test_runspec_refuses_a_batch_that_does_not_split(data):
    with pytest.raises(ValueError, match="does not split evenly"):
        RunSpec(data, "lenet", 3, 64, 0.1, 1)


def test_fresh_model_per_run_same_seed_same_result(data):
    spec = RunSpec(data, "lenet", 2, 64, 0.1, 1, seed=3, profile="ci")
    a, b = run_method("split", spec), run_method("split", spec)
    assert a[0].train_loss == b[0].train_loss and a[0].test_acc == b[0].test_acc
    other = run_method("split", RunSpec(data, "lenet", 2, 64, 0.1, 1, seed=4, profile="ci"))
    assert other[0].train_loss != a[0].train_loss


def test_split_and_dataparallel_match_the_reference_on_lenet(data):
    """Strong scaling computes the same thing: same losses at 1 device and at 2."""
    ref = run_method("reference", RunSpec(data, "lenet", 1, 64, 0.1, 1, profile="ci"))
    for name in ("split", "dataparallel"):
        got = run_method(name, RunSpec(data, "lenet", 2, 64, 0.1, 1, profile="ci"))
        torch.testing.assert_close(got[0].train_loss, ref[0].train_loss, rtol=1e-4, atol=1e-5)
        assert got[0].n_devices == 2


def test_split_follows_the_warmup_schedule(data):
    plain = run_method("split", RunSpec(data, "lenet", 2, 64, 0.2, 1, profile="ci"))
    warm = run_method(
        "split", RunSpec(data, "lenet", 2, 64, 0.2, 1, profile="ci", base_lr=0.1, lr_rule="warmup")
    )
    ref = run_method(
        "reference",
        RunSpec(data, "lenet", 2, 64, 0.2, 1, profile="ci", base_lr=0.1, lr_rule="warmup"),
    )
    assert warm[0].train_loss != plain[0].train_loss
    torch.testing.assert_close(warm[0].train_loss, ref[0].train_loss, rtol=1e-4, atol=1e-5)
