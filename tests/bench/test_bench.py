import subprocess
import sys

import pytest

from companion.core.noise import Ratio
from companion_tools.bench import available, time_median
from companion_tools.bench.loop import LoopTimes, measure, report

pytestmark = pytest.mark.ch1


def test_time_median_and_bad_repeats():
    assert time_median(lambda: None, repeats=3) >= 0
    with pytest.raises(ValueError, match="repeats"):
        time_median(lambda: None, repeats=0)


def test_loop_benchmark_measures_both_loops():
    result = measure("ci", rounds=1)
    assert set(result) == {"device-resident", "DataLoader"}
    for sec, efficiency in result.values():
        assert sec > 0 and 0 < efficiency.low <= efficiency.high <= 1 and efficiency.rounds == 1
    assert result.profile == "ci" and "target" not in report(result)  # the target is cpu's


def test_the_loop_target_is_judged_under_the_cpu_profile_only():
    times = LoopTimes({"device-resident": (1.0, Ratio.of([0.985, 0.99, 0.99]))})
    times.profile = "cpu"
    assert report(times).endswith("target >= 0.98: met")
    times["device-resident"] = (1.0, Ratio.of([0.97, 0.985, 0.99]))
    assert "noise (rounds on both sides of 0.98)" in report(times)


def test_cli_lists_benchmarks_and_rejects_unknown_ones():
    out = subprocess.run(
        [sys.executable, "-m", "companion_tools.bench", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "loop" in out.stdout and "loop" in available()
    bad = subprocess.run(
        [sys.executable, "-m", "companion_tools.bench", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown benchmark 'nope'" in bad.stderr


def test_no_help_line_is_wider_than_a_terminal(monkeypatch, capsys):
    """Every benchmark's --help, and the list of benchmarks, within HELP_WIDTH columns (their
    descriptions and the noise rule were once single lines of up to 417 characters)."""
    from companion_tools.bench import HELP_WIDTH
    from companion_tools.bench.__main__ import main

    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps the options to the terminal's width
    for argv in (["--help"], *([name, "--help"] for name in available())):
        try:
            status = main(argv)
        except SystemExit as done:  # argparse ends --help so
            status = done.code
        out = capsys.readouterr().out
        assert status == 0, argv
        wide = [line for line in out.splitlines() if len(line) > HELP_WIDTH]
        assert not wide, (argv, wide)
        assert len(out.splitlines()) > 5, argv
