"""glibc's malloc keeps freed memory once ``keep_freed_memory()`` is called, and not before:
``import companion`` leaves the process's settings alone. A step that allocates and frees the
same blocks again then faults no new pages, where glibc's defaults fault ~1,000 per step.

The pattern is what a training step does, made deterministic: a worker thread (torch's
intra-op threads allocate in arenas of their own) takes twenty 250 KiB blocks and frees them
newest first, twenty times. Each run is a fresh interpreter, as the setting applies per process.
"""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="the setting is glibc's; other C libraries keep theirs",
)

ROUNDS = """
import json, resource, sys, threading, torch
import companion, companion.core as core
kept = core.keep_freed_memory() if sys.argv[1] == "call" else None
faults = []
def work():
    for _ in range(20):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [torch.empty(250 << 10, dtype=torch.uint8).fill_(1) for _ in range(20)]
        blocks.reverse()
        del blocks
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
thread = threading.Thread(target=work)
thread.start()
thread.join()
print(json.dumps({"kept": kept, "faults": faults}))
"""


def page_faults(how: str, opt_out: str = "1") -> dict:
    env = {**os.environ, "COMPANION_KEEP_FREED_MEMORY": opt_out}
    done = subprocess.run(
        [sys.executable, "-c", ROUNDS, how], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_freed_memory_is_reused_after_the_call_and_not_after_the_import():
    kept, imported, opted_out = page_faults("call"), page_faults("import"), page_faults("call", "0")
    assert kept["kept"] is True and opted_out["kept"] is False
    # Once settled, the blocks come back from the process: at most one block's pages (63)
    # a round, where an arena's top still moves (an H100 machine's kernel took 7 rounds to
    # reach 0, this CPU's 4), against all twenty blocks' pages with glibc's defaults.
    assert max(kept["faults"][-5:]) <= 64, kept
    for default in (imported, opted_out):  # the import alone, or the reader's opt-out
        assert min(default["faults"][-5:]) >= 500, default  # fresh pages each time
