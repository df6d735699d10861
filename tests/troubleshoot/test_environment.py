"""Variables for one run, a worker's stderr caught at the file-descriptor level, masking."""

import os

import pytest

from companion.troubleshoot.environment import captured_stderr, masked, temporary_env

pytestmark = pytest.mark.ch8


def test_temporary_env_sets_unsets_and_restores_even_after_an_error(monkeypatch):
    monkeypatch.setenv("TS_KEPT", "before")
    monkeypatch.delenv("TS_NEW", raising=False)
    with pytest.raises(KeyError), temporary_env(TS_KEPT=None, TS_NEW="x"):
        assert "TS_KEPT" not in os.environ and os.environ["TS_NEW"] == "x"
        raise KeyError("inside")
    assert os.environ["TS_KEPT"] == "before" and "TS_NEW" not in os.environ


def test_temporary_env_refuses_bad_names_and_values():
    with pytest.raises(ValueError, match="not an environment variable name"):
        temporary_env(**{"A-B": "1"}).__enter__()
    with pytest.raises(TypeError, match=r"OMP_NUM_THREADS='2'"):
        temporary_env(OMP_NUM_THREADS=2).__enter__()


def test_captured_stderr_catches_what_is_written_to_file_descriptor_2(tmp_path):
    path = tmp_path / "log.txt"
    with captured_stderr(str(path)) as log:
        os.write(2, b"from C++, below sys.stderr\n")
    assert log.text == "from C++, below sys.stderr\n" == path.read_text()
    with captured_stderr() as log:
        os.write(2, b"again\n")
    assert log.text == "again\n"


def test_masked_replaces_ports_and_log_times_only():
    text = (
        "Connection closed by peer [127.0.0.1]:40146. [E1123 07:16:47.699 Gloo.cpp:68] port: 29500"
    )
    assert (
        masked(text)
        == "Connection closed by peer [127.0.0.1]:PORT. [E<time> Gloo.cpp:68] port: PORT"
    )
