"""The committed GPU measurements (chapters 1 and 7) parse and carry their labels."""

import json

import pytest

from companion_tools.bench.record import LABELS, RESULTS, committed, label, load_record, plot_record


def test_the_committed_record_and_study_parse_and_say_where_they_were_measured():
    seen, study = committed()
    assert all(seen[k] for k in LABELS)
    assert "GPU" in seen["hardware"] or "NVIDIA" in seen["hardware"]
    assert seen["cuda"] != "none" and seen["profile"] == "gpu" and seen["baseline"]["gpu"]
    assert set(seen["loop"]) == {"device-resident", "DataLoader"}
    ratio = seen["baseline"]["median"]["companion"] / seen["baseline"]["median"]["d2l's loop"]
    assert seen["baseline"]["ratio"] == pytest.approx(ratio)
    # the study ran in the same session: same machine and torch, every record labelled
    meta = json.loads((RESULTS / "h200-study.json").read_text())
    assert meta["hardware"] == [seen["hardware"]] and meta["torch"] == seen["torch"]
    assert study and all(
        r.hardware == seen["hardware"] and r.profile == "gpu" and r.precision for r in study
    )
    assert {r.n_devices for r in study} == {1, 2}
    assert seen["hardware"] in label(seen) and seen["date"] in label(seen)


def test_a_record_without_its_labels_is_refused(tmp_path):
    seen, _ = committed()
    for key in ("hardware", "date", "baseline"):
        path = tmp_path / f"no-{key}.json"
        path.write_text(json.dumps({k: v for k, v in seen.items() if k != key}))
        with pytest.raises(ValueError, match=f"lacks {key}: a number without its labels"):
            load_record(path)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="is not a benchmark record"):
        load_record(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="no committed measurements named 'a100'; there are: h200"):
        committed("a100")


def test_the_figure_names_its_hardware_and_shows_four_loops():
    seen, _ = committed()
    fig = plot_record(seen)
    [ax] = fig.axes
    assert len(ax.patches) == 4 and seen["hardware"] in ax.get_title()


def test_what_chapters_1_and_7_say_of_the_committed_numbers_holds():
    """The pages read these numbers in words; a new measurement that says otherwise fails here."""
    from companion.core.noise import TARGETS
    from companion.study import aggregate

    seen, study = committed()
    loops = seen["loop"]
    # chapter 1: device-resident ~all compute; the DataLoader loses over a quarter; target missed
    assert loops["device-resident"]["loop_efficiency"] > 0.95
    assert 0.65 < loops["DataLoader"]["loop_efficiency"] < 0.75  # "over a quarter"
    d2l = seen["baseline"]["median"]["d2l's loop"]
    assert d2l < loops["DataLoader"]["sec_per_epoch"]  # its workers hide the batch building
    assert d2l < 1.1 * loops["device-resident"]["sec_per_epoch"]  # "comes close"
    assert TARGETS["baseline"].value < seen["baseline"]["ratio"] < 0.7
    # chapter 7: split on the GPU named twice is slower; DDP and split about equal at 1
    points = {(p.method, p.n_devices): p for p in aggregate(study)}
    assert set(points) == {("split", 1), ("split", 2), ("ddp", 1)}
    assert points["split", 2].sec_per_epoch > points["split", 1].sec_per_epoch
    assert abs(points["ddp", 1].sec_per_epoch / points["split", 1].sec_per_epoch - 1) < 0.1
