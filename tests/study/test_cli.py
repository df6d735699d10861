import pytest

from companion.study.cli import main, parse_args
from companion.study.driver import load_study

pytestmark = pytest.mark.ch7


def test_cli_writes_table_plots_and_reloads(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    paths = main(
        [
            "--methods",
            "split",
            "--devices",
            "1,2",
            "--seeds",
            "0",
            "--epochs",
            "1",
            "--samples",
            "128",
            "--profile",
            "ci",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    names = sorted(p.name for p in paths)
    assert names == ["speedup.png", "study.csv", "study.json", "study.png", "table.txt"]
    assert len(load_study(tmp_path / "study.csv")) == 2
    assert "measured on:" in capsys.readouterr().out
    again = main(["--plot-only", "--out", str(tmp_path)])
    assert len(again) == 5


def test_cli_rejects_unknown_methods():
    with pytest.raises(SystemExit):
        parse_args(["--methods", "nope"])


def test_help_says_what_each_flag_of_the_table_means(capsys):
    """Issue 36: "noise" was explained nowhere a user looks."""
    from companion.study.analysis import FLAGS

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, at hyphens too
    for flag, why in FLAGS.items():
        assert "".join(f"'{flag}': {why}".split()) in text
    assert "quietmachine" in text and "``" not in text


def test_help_says_what_every_method_name_stands_for(capsys):
    """Issue 56: --methods named powersgd, localsgd and diloco without saying they mean
    PowerSGD r4, local SGD H16 and DiLoCo H16 at the study's lr, momentum 0."""
    from companion.commands import STUDY_METHODS

    with pytest.raises(SystemExit):
        parse_args(["--help"], STUDY_METHODS)
    text = " ".join(capsys.readouterr().out.split())
    for name, method in STUDY_METHODS.items():
        assert method.about and f"{name} (chapter {method.chapter}: " in text, name
    assert "PowerSGD, rank 4" in text and "local SGD, H = 16" in text and "DiLoCo, H = 16" in text
    assert "do not apply" in text and "momentum 0.9" in text
