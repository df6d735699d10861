"""The judge of `make profile-check`: what fails a notebook run under another profile."""

import importlib.util
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

pytestmark = pytest.mark.book

_spec = importlib.util.spec_from_file_location(
    "execute_notebooks", Path(__file__).resolve().parents[1] / ".ci" / "execute_notebooks.py"
)
judge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(judge)


def notebook(*texts, name="stdout"):
    cells = [new_markdown_cell("# a page")]
    for text in texts:
        cells.append(new_code_cell("pass", outputs=[new_output("stream", name=name, text=text)]))
    return new_notebook(cells=cells)


def test_a_self_check_that_flips_fails_the_run():
    committed = notebook("replayed steps, same losses: True\n")
    run = notebook("replayed steps, same losses: False\n")
    [problem] = judge.problems_of(run, committed, [])
    assert "cell 1" in problem and "same losses" in problem and "['False']" in problem


def test_facts_false_on_purpose_numbers_and_listings_pass():
    committed = notebook("replica weights equal: True | share memory: False\nstep 30 of 64: True\n")
    run = notebook("replica weights equal: True | share memory: False\nstep 40 of 128: True\n")
    assert judge.problems_of(run, committed, []) == []
    listing = new_notebook(
        cells=[
            new_code_cell(
                "show(f)",
                outputs=[
                    new_output(
                        "display_data",
                        data={"text/plain": "flag: bool = False", "text/markdown": "x"},
                    )
                ],
            )
        ]
    )
    assert judge.verdicts(listing) == {}


def test_errors_stderr_and_leftover_files_fail_the_run():
    run = notebook("ok\n")
    run.cells.append(
        new_code_cell(
            "1/0",
            outputs=[
                new_output(
                    "error", ename="ZeroDivisionError", evalue="division by zero", traceback=[]
                )
            ],
        )
    )
    run.cells.append(
        new_code_cell(
            "train()",
            outputs=[new_output("stream", name="stderr", text="epoch 1: 100%|##########| 63/63\n")],
        )
    )
    problems = judge.problems_of(run, None, ["ch07-abc"])
    assert len(problems) == 3
    assert "ZeroDivisionError" in problems[0] and "stderr (1 time(s)): epoch 1: 100%" in problems[1]
    assert "ch07-abc" in problems[2]


def test_a_run_that_leaves_files_or_raises_exits_1(tmp_path):
    book = tmp_path / "nb.ipynb"
    nb = new_notebook(
        cells=[
            new_code_cell(
                "import os, tempfile\nopen(os.path.join(tempfile.gettempdir(), 'stray'), 'w').close()"
            ),
            new_code_cell("print('claim: True')"),
        ]
    )
    nbformat.write(nb, book)
    committed = nbformat.read(book, as_version=4)
    committed.cells[1].outputs = [new_output("stream", name="stdout", text="claim: False\n")]
    nbformat.write(committed, book)
    assert judge.main(["--same-checks", str(tmp_path / "out"), str(book)]) == 1
    problems = judge.run(str(book), tmp_path / "out2", same_checks=True)
    assert any("stray" in p for p in problems) and any("claim" in p for p in problems)


def test_a_scratch_folder_is_gone_after_the_kernel_and_two_notebooks_keep_their_own_tmp(tmp_path):
    cells = [
        new_code_cell(
            "import torch\nfrom companion.core import scratch_dir\n"
            "(scratch_dir('ch99-') / 'f').write_text('x')"
        )
    ]
    for name in ("a", "b"):
        nbformat.write(new_notebook(cells=cells), tmp_path / f"{name}.ipynb")
    assert (
        judge.main([str(tmp_path / "out"), str(tmp_path / "a.ipynb"), str(tmp_path / "b.ipynb")])
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.ipynb", "b.ipynb"]


def test_jobs_run_notebooks_side_by_side_and_progress_says_how_far_each_got(tmp_path):
    """``--jobs 2 --progress`` (make gpu-check): both notebooks judged, one line per finished cell."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / ".ci" / "execute_notebooks.py"
    cells = [new_code_cell("print('ran: True')"), new_code_cell("raise SystemError('planted')")]
    for name in ("a", "b"):
        nbformat.write(
            new_notebook(cells=cells[: 1 if name == "a" else 2]), tmp_path / f"{name}.ipynb"
        )
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--jobs",
            "2",
            "--progress",
            str(tmp_path / "out"),
            str(tmp_path / "a.ipynb"),
            str(tmp_path / "b.ipynb"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert {"out/a: cell 0 of 1 done", "out/b: cell 0 of 2 done", "out/b: cell 1 of 2 done"} == {
        line.split(" after ")[0] for line in lines if " done after " in line
    }, done.stdout + done.stderr
    assert any("b.ipynb cell 1: SystemError: planted" in line for line in lines)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.ipynb", "b.ipynb"]
    bad = subprocess.run(
        [
            sys.executable,
            str(script),
            "--jobs",
            "0",
            str(tmp_path / "out"),
            str(tmp_path / "a.ipynb"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "--jobs takes a whole number >= 1, got '0'" in bad.stderr
