import json
import math

import pytest

from companion.study.driver import (
    StudyRecord,
    load_study,
    plan,
    run_study,
    save_study,
    subset,
)

pytestmark = pytest.mark.ch7


@pytest.fixture
def data(small_sample):  # 256 + 64 digits of the sample (tests/conftest.py)
    return small_sample


def test_plan_strong_and_weak(data):
    strong = plan(
        ["split"], [1, 2], [0, 1, 2], data=data, model="lenet", batch=64, lr=0.1, epochs=1
    )
    assert len(strong) == 6
    assert {(s.n_devices, s.global_batch, s.lr) for _, s in strong} == {(1, 64, 0.1), (2, 64, 0.1)}
    weak = plan(
        ["split"],
        [1, 2, 4],
        [0],
        data=data,
        model="lenet",
        batch=16,
        lr=0.1,
        epochs=1,
        scaling="weak",
        lr_rule="linear",
    )
    assert [(s.global_batch, s.lr) for _, s in weak] == [(16, 0.1), (32, 0.2), (64, 0.4)]
    with pytest.raises(ValueError, match="strong scaling keeps the global batch"):
        plan(
            ["split"],
            [1],
            [0],
            data=data,
            model="lenet",
            batch=8,
            lr=0.1,
            epochs=1,
            lr_rule="linear",
        )
    with pytest.raises(ValueError, match="unknown method"):
        plan(["nope"], [1], [0], data=data, model="lenet", batch=8, lr=0.1, epochs=1)


def test_plan_gives_every_run_one_precision(data):
    runs = plan(["split", "ddp"], [1, 2], [0], data=data, model="lenet", batch=64, lr=0.1, epochs=1)
    assert {s.precision for _, s in runs} == {"fp32"}
    runs = plan(
        ["ddp"], [1, 2], [0], data=data, model="lenet", batch=64, lr=0.1, epochs=1, precision="bf16"
    )
    assert [s.precision for _, s in runs] == ["bf16", "bf16"]
    with pytest.raises(ValueError, match="precision"):
        plan(
            ["ddp"], [1], [0], data=data, model="lenet", batch=64, lr=0.1, epochs=1, precision="fp8"
        )


def test_tiny_real_study_1_vs_2_devices_round_trips(data, tmp_path, capsys):
    """A real run of the driver, with DDP in 2 processes: saved, reloaded, same records;
    with log_lines (the command line writing to a pipe), one line per finished run."""
    runs = plan(["ddp"], [1, 2], [0], data=data, model="lenet", batch=64, lr=0.1, epochs=1)
    records = run_study(runs, path=tmp_path / "s", progress=False, log_lines=True)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(", seed")[0] for line in lines] == [
        "run 1/2 done: ddp, 1 device(s)",
        "run 2/2 done: ddp, 2 device(s)",
    ]
    assert [(r.method, r.n_devices, r.epoch) for r in records] == [("ddp", 1, 1), ("ddp", 2, 1)]
    # DDP on LeNet at 2 processes computes what 1 does: the same training loss
    assert math.isclose(records[0].train_loss, records[1].train_loss, rel_tol=1e-4)
    assert [r.virtual for r in records] == [False, True]  # 2 CPU processes: virtual
    for suffix in (".csv", ".json"):  # every field comes back as it was, booleans too
        assert load_study(tmp_path / f"s{suffix}") == records
    meta = json.loads((tmp_path / "s.json").read_text())
    assert meta["profiles"] == ["ci"] and meta["hardware"] == [records[0].hardware]


def test_save_is_atomic(tmp_path, data):
    good = [StudyRecord("m", 1, 1, 0.5, 1.0, 10.0, 2.0, "hw", "ci", seed=0)]
    save_study(good, tmp_path / "s")

    broken = [*good, object()]  # asdict fails half-way: nothing may change on disk
    with pytest.raises(TypeError):
        save_study(broken, tmp_path / "s")
    assert load_study(tmp_path / "s.csv") == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv", "s.json"]


def test_load_refuses_other_files(tmp_path):
    (tmp_path / "x.json").write_text('{"rows": []}')
    with pytest.raises(ValueError, match="not a study file"):
        load_study(tmp_path / "x.json")


def test_subset_sizes_and_errors(data):
    small = subset(data, 100, 10)
    assert (len(small.train), len(small.test)) == (100, 10)
    with pytest.raises(ValueError, match="asked for"):
        subset(data, 10_000, 10)
