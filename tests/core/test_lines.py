"""Whole lines: what an unbuffered stream receives from say(), and two processes on one pipe."""

import io
import os
import subprocess
import sys

import pytest

from companion.core import say

pytestmark = pytest.mark.ch5


class Writes(io.RawIOBase):
    """A raw stream that records each write() it receives, as `python -u` hands them on."""

    def __init__(self):
        self.calls: list[bytes] = []

    def writable(self):
        return True

    def write(self, b):
        self.calls.append(bytes(b))
        return len(b)


def unbuffered_stdout():
    raw = Writes()
    return raw, io.TextIOWrapper(raw, encoding="utf-8", write_through=True)


def test_say_hands_an_unbuffered_stream_each_line_in_one_write():
    raw, stream = unbuffered_stdout()
    say("step", 30, "loss", 2.0004, file=stream)
    say(file=stream)
    assert raw.calls == [b"step 30 loss 2.0004\n", b"\n"]


def test_print_splits_the_same_line_in_two_writes_which_is_why_workers_use_say():
    raw, stream = unbuffered_stdout()
    print("step 30 loss 2.0004", file=stream, flush=True)
    assert raw.calls == [b"step 30 loss 2.0004", b"\n"]


WRITER = """
import sys
from companion.core import say
for i in range(int(sys.argv[2])):
    say(f"worker {sys.argv[1]} line {i} " + "x" * 60)
"""


def test_two_unbuffered_processes_sharing_a_pipe_never_merge_lines():
    n = 3000
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    r, w = os.pipe()
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(k), str(n)], stdout=w, env=env)
        for k in range(2)
    ]
    os.close(w)
    with os.fdopen(r) as pipe:
        out = pipe.read()
    for p in procs:
        assert p.wait(timeout=120) == 0
    lines = out.splitlines()
    assert len(lines) == 2 * n
    assert all(
        line.startswith("worker ") and line.endswith("x" * 60) and line.count("worker") == 1
        for line in lines
    )


@pytest.mark.parametrize("width", [40, 88, 100])
def test_shell_lines_keeps_every_word_and_each_line_within_the_width(width):
    import shlex

    from companion.core import shell_lines

    command = (
        "torchrun --nnodes=2 --nproc-per-node=1 --max-restarts=0 --rdzv-backend=c10d "
        "--rdzv-endpoint=127.0.0.1:29500 --rdzv-id=two-nodes -m companion.elastic "
        "--profile ci --epochs 2 --snapshot /tmp/work/nodes/snapshot.pt"
    )
    wrapped = shell_lines(command, width)
    lines = wrapped.splitlines()
    assert len(lines) > 1 and all(len(line) <= width for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert shlex.split(wrapped.replace(" \\\n", " ")) == shlex.split(command)
    assert shell_lines("echo hi", width) == "echo hi"


def test_number_of_writes_the_noun_in_the_singular_for_one_only():
    from companion.core import number_of

    assert number_of(1, "process") == "1 process"  # issue 36: "1 processes"
    assert number_of(2, "process") == "2 processes"
    assert number_of(0, "all-reduce") == "0 all-reduces"
    assert number_of(1.0, "all-reduce") == "1 all-reduce"
    assert number_of(3, "child", "children") == "3 children"
