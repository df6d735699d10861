"""``import companion`` (every subpackage, and the tools) changes no process-wide setting:
not the C library's malloc, the warnings filters, the environment, torch's threads,
precision, default dtype, random state or determinism, the signal handlers, the logging
handlers, the multiprocessing start method. What the book turns on, it turns on by name,
when it runs. (The libraries it imports may set their own at import: sympy, loaded by
torch's compiler stack, adds a warnings filter; the snapshot imports it first.)"""

import json
import subprocess
import sys

import pytest

SNAPSHOT = r"""
import ctypes, json, logging, multiprocessing, os, random, signal, sys, warnings
import torch
import sympy  # torch's dependency: its import adds a warnings filter of its own, not ours

calls = []
real_cdll = ctypes.CDLL
class Spy:  # records what is asked of the C library (mallopt, the allocator's setting)
    def __init__(self, *args, **kwargs):
        self._lib = real_cdll(*args, **kwargs)
    def __getattr__(self, name):
        calls.append(name)
        return getattr(self._lib, name)
ctypes.CDLL = Spy

def settings():
    return {
        "warnings": repr(warnings.filters),
        "environ": dict(os.environ),
        "threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
        "dtype": str(torch.get_default_dtype()),
        "matmul": torch.get_float32_matmul_precision(),
        "tf32": [torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32],
        "deterministic": [torch.are_deterministic_algorithms_enabled(),
                          torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark],
        "grad": torch.is_grad_enabled(),
        "torch_rng": torch.get_rng_state().tolist(),
        "python_rng": repr(random.getstate()),
        "signals": {s.name: repr(signal.getsignal(s))
                    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1)},
        "logging": [repr(logging.root.handlers), logging.root.level],
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "excepthook": repr(sys.excepthook),
    }

before = settings()
import companion
for name in ("core", "runtime", "split", "collectives", "dataparallel", "ddp", "internals",
             "study", "elastic", "sharding", "slowlinks", "troubleshoot", "commands"):
    __import__(f"companion.{name}")
for name in ("bench", "pictures"):  # the tools: imported by the chapters that measure and draw
    __import__(f"companion_tools.{name}")
after = settings()
changed = sorted(k for k in before if before[k] != after[k])
print(json.dumps({"changed": changed, "calls": calls,
                  "diff": {k: [str(before[k])[:300], str(after[k])[:300]] for k in changed}}))
"""


@pytest.mark.timeout(300)
def test_import_companion_changes_no_process_wide_setting():
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["changed"] == [], seen["diff"]
    assert "mallopt" not in seen["calls"], seen["calls"]
