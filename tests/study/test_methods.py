import pytest
import torch

from companion.commands import STUDY_METHODS
from companion.study.methods import METHODS, Method, RunSpec, run_method

pytestmark = pytest.mark.ch7


@pytest.fixture
def data(small_sample):  # 256 + 64 digits of the sample (tests/conftest.py)
    return small_sample


def test_the_study_holds_chapters_1_to_6_and_the_command_line_every_chapter_in_order():
    assert [m.chapter for m in METHODS.values()] == [1, 2, 3, 4, 5, 6]
    chapters = [m.chapter for m in STUDY_METHODS.values()]
    assert chapters == sorted(chapters) and set(chapters) == {1, 2, 3, 4, 5, 6, 9, 10, 11}
    assert {k: v for k, v in STUDY_METHODS.items() if v.chapter <= 6} == METHODS


def test_chapter_6_rebuild_trains_like_chapter_5_ddp(data):
    """Same sampler, loader and seed: the rebuilt DDP and torch's DDP give the same losses."""
    spec = RunSpec(data, "lenet", 2, 64, 0.1, 1, profile="ci")
    ddp, mine = run_method("ddp", spec), run_method("internals", spec)
    assert [r.method for r in mine] == ["internals"] and mine[0].n_devices == 2
    torch.testing.assert_close(mine[0].train_loss, ddp[0].train_loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(mine[0].test_acc, ddp[0].test_acc, rtol=0, atol=1e-9)


def test_chapter_9_sharded_methods_join_the_study_and_train_like_ddp(data):
    """ZeRO-3 and FSDP2 through the study's runner: chapter 9's methods, the same losses as DDP."""
    assert (STUDY_METHODS["zero3"].chapter, STUDY_METHODS["fsdp2"].chapter) == (9, 9)
    spec = RunSpec(data, "lenet", 2, 64, 0.1, 1, profile="ci")
    ddp = run_method("ddp", spec)
    for name in ("zero3", "fsdp2"):
        records = run_method(name, spec, STUDY_METHODS)
        assert [r.method for r in records] == [name] and records[0].precision == "fp32"
        torch.testing.assert_close(records[0].train_loss, ddp[0].train_loss, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(records[0].test_acc, ddp[0].test_acc, rtol=0, atol=1e-9)


def test_chapter_10_methods_join_the_study(data):
    """PowerSGD, local SGD and DiLoCo through the study's runner: records under their names."""
    assert [STUDY_METHODS[m].chapter for m in ("powersgd", "localsgd", "diloco")] == [10, 10, 10]
    spec = RunSpec(data, "lenet", 2, 64, 0.1, 1, profile="ci")
    for name in ("powersgd", "localsgd", "diloco"):
        records = run_method(name, spec, STUDY_METHODS)
        assert [r.method for r in records] == [name] and records[0].n_devices == 2
        assert 0 < records[0].train_loss < 3 and 0 <= records[0].test_acc <= 1


def test_chapter_11_method_joins_the_study_and_is_one_run_on_any_device_count(data):
    """The pieces' step through the study's runner: 1 and 2 devices record the same test
    accuracy, exactly (the same bits); the training loss is the loop's bookkeeping, summed
    per rank, so its last bits follow the split."""
    assert STUDY_METHODS["samebits"].chapter == 11
    one, two = (
        run_method("samebits", RunSpec(data, "lenet", n, 64, 0.1, 1, profile="ci"), STUDY_METHODS)
        for n in (1, 2)
    )
    assert [r.method for r in one + two] == ["samebits"] * 2 and two[0].n_devices == 2
    assert one[0].test_acc == two[0].test_acc
    assert one[0].train_loss == pytest.approx(two[0].train_loss, rel=1e-6)


def test_a_table_of_ones_own_is_one_line_and_leaves_the_study_s_alone(data):
    def fake(spec):
        return run_method("reference", spec)

    mine = {**METHODS, "test-fake": Method(fake, 6, processes=False, warmup=False)}
    records = run_method("test-fake", RunSpec(data, "lenet", 1, 64, 0.1, 1, profile="ci"), mine)
    assert [r.method for r in records] == ["test-fake"] and "test-fake" not in METHODS
    with pytest.raises(ValueError, match="no per-step learning-rate schedule"):
        spec = RunSpec(data, "lenet", 2, 64, 0.2, 1, base_lr=0.1, lr_rule="warmup")
        run_method("test-fake", spec, mine)
    with pytest.raises(ValueError, match="unknown method 'test-fake'"):
        run_method("test-fake", spec)


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
