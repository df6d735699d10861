"""TensorBoard: rank 0 writes, the scalars read back, and neither side prints warnings."""

import subprocess
import sys
import textwrap

import pytest

from companion.runtime import event_files, open_writer, read_scalars

pytestmark = pytest.mark.ch5


def test_rank_zero_writes_scalars_that_read_back(tmp_path):
    assert open_writer(tmp_path / "logs", rank=1) is None and open_writer(None, rank=0) is None
    assert not (tmp_path / "logs").exists()
    writer = open_writer(tmp_path / "logs", rank=0)
    for step, value in ((1, 0.5), (2, 0.25), (3, 0.125)):
        writer.add_scalar("train/loss", value, step)
    writer.add_scalar("test/accuracy", 0.75, 3)
    writer.close()
    assert len(event_files(tmp_path / "logs")) == 1
    assert read_scalars(tmp_path / "logs") == {
        "test/accuracy": [(3, 0.75)],
        "train/loss": [(1, 0.5), (2, 0.25), (3, 0.125)],
    }


def test_bad_directories_say_what_to_do(tmp_path):
    (tmp_path / "afile").write_text("")
    with pytest.raises(NotADirectoryError, match="choose a directory"):
        open_writer(tmp_path / "afile", rank=0)
    with pytest.raises(FileNotFoundError, match="no TensorBoard event files"):
        read_scalars(tmp_path)


def test_writing_and_reading_print_nothing_on_stderr(tmp_path):
    # The notebook compares stderr: importing TensorBoard, writing and reading must stay quiet.
    script = textwrap.dedent(f"""
        from companion.runtime.tblog import open_writer, read_scalars
        writer = open_writer({str(tmp_path)!r}, rank=0)
        writer.add_scalar("a", 1.0, 1)
        writer.close()
        print(read_scalars({str(tmp_path)!r}))
    """)
    out = subprocess.run(
        [sys.executable, "-W", "default", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "{'a': [(1, 1.0)]}"
    assert out.stderr == ""
