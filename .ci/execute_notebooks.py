"""Execute chapters under the current profile into a folder, and judge the run.

Used by ``make profile-check`` and ``make gpu-check``::

    python .ci/execute_notebooks.py [--same-checks] [--jobs N] [--progress] OUT_DIR book/*.ipynb

The committed notebooks stay as they are. Every cell runs, even after an
error, so one run lists every problem. A notebook fails when:

* a cell raised;
* a cell wrote to stderr (a warning or a progress bar: the pages promise none);
* it left files in its temporary directory (each notebook's kernel gets a
  fresh ``TMPDIR``, checked empty once the kernel has exited; torch's compile
  cache is no leftover). It is made in the system's temporary directory, not
  under OUT_DIR: the fork server's socket lives there, and a Unix socket's path
  may not be longer than 107 bytes (a checkout's deep path made chapter 8 fail
  with "AF_UNIX path too long");
* with ``--same-checks``: a self-check printed another verdict than in the
  committed notebook (run under ``ci``). A self-check is a printed
  ``label: True`` or ``label: False``; it is matched by cell and by its label
  with the numbers taken out, so "replayed steps, same losses: False" under
  one profile fails where the committed run says True. Facts that are False
  on purpose ("share memory: False") are False in both and pass.

Each notebook's wall time is printed; the exit status is 1 on any failure.
``--jobs N`` runs N notebooks at a time, each in its own process and kernel on
its own slice of the cores (CI: two jobs on 2 cores, one core each; a chapter's
self-checks do not depend on its thread count). ``--progress`` prints a
line as each cell finishes, so a run stopped by a time limit still says how
far every notebook got.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from multiprocessing import get_context
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from traitlets.config import Config

VERDICT = re.compile(r"([A-Za-z][^:|\n]*?):\s*(True|False)\b")
NUMBER = re.compile(r"[-+]?\d[\d,.]*(e[-+]?\d+)?")
CACHES = ("torchinductor_",)  # torch's compile cache, shared by every torch program


def say(line: str) -> None:
    """``line`` and its newline in one write: jobs share the pipe, and ``print`` under
    ``PYTHONUNBUFFERED=1`` writes the text and the newline apart, so lines of two jobs merged."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), f"{line}\n".encode())


def text_of(output: dict) -> str:
    """The text a reader sees of one output (streams and plain results, not listings)."""
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "execute_result":
        return "".join(output.get("data", {}).get("text/plain", ""))
    return ""


def verdicts(nb) -> dict[tuple[int, str], set[str]]:
    """``(cell index, label without numbers) -> {"True", "False"}`` printed by each code cell."""
    found: dict[tuple[int, str], set[str]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            for label, verdict in VERDICT.findall(text_of(output)):
                key = (i, NUMBER.sub("#", label.strip()))
                found.setdefault(key, set()).add(verdict)
    return found


def _clip(text: str, head: int = 600, tail: int = 3000) -> str:
    """An error's message, whole unless long: then its start and its end, where a
    process's last output (the cause of a timeout, say) usually is."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]}\n[... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


def problems_of(nb, committed, leftovers: list[str]) -> list[str]:
    found = []
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "error":
                found.append(f"cell {i}: {output['ename']}: {_clip(output['evalue'])}")
        errs = [
            o.get("text", "")
            for o in cell.get("outputs", [])
            if cell.cell_type == "code"
            and o.get("output_type") == "stream"
            and o.get("name") == "stderr"
        ]
        if errs:
            first = next((t.strip().splitlines()[0] for t in errs if t.strip()), "(blank)")
            found.append(f"cell {i} wrote to stderr ({len(errs)} time(s)): {first[:200]}")
    if committed is not None:
        want = verdicts(committed)
        for key, got in verdicts(nb).items():
            if key in want and got != want[key]:
                found.append(
                    f"cell {key[0]}: self-check '{key[1]}' gave {sorted(got)}, "
                    f"the committed run {sorted(want[key])}"
                )
    found += [f"left behind in its temporary directory: {name}" for name in leftovers]
    return found


def cell_times(nb) -> list[tuple[float, int]]:
    """``(seconds, cell index)`` of each cell run, from the timings nbclient records."""
    times = []
    for i, cell in enumerate(nb.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        begin, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if begin and end:
            seconds = (
                datetime.fromisoformat(end.replace("Z", "+00:00"))
                - datetime.fromisoformat(begin.replace("Z", "+00:00"))
            ).total_seconds()
            times.append((seconds, i))
    return times


def slowest(nb, k: int = 3) -> str:
    """The ``k`` slowest cells: where a profile spends its time."""
    return ", ".join(f"cell {i} {s:.0f} s" for s, i in sorted(cell_times(nb), reverse=True)[:k])


def longest_first(paths: list[str]) -> list[str]:
    """The notebooks, the longest committed run first: with several jobs the last to start
    is then a short one, and no job is left running alone for long."""
    cost = {p: sum(s for s, _ in cell_times(nbformat.read(p, as_version=4))) for p in paths}
    return sorted(paths, key=lambda p: -cost[p])


def run(path: str, out: Path, same_checks: bool, progress: bool = False) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    committed = nbformat.read(path, as_version=4) if same_checks else None
    out.mkdir(parents=True, exist_ok=True)
    short = "/tmp" if os.path.isdir("/tmp") else None  # the runner's own TMPDIR may be deep
    tmp = Path(tempfile.mkdtemp(prefix="nb-", dir=short))  # the fork server's socket is in it
    patient = Config()
    patient.KernelManager.shutdown_wait_time = 60.0  # exit by itself, atexit handlers run
    client = NotebookClient(
        nb,
        config=patient,
        timeout=1800,
        startup_timeout=300,  # not nbclient's 60 s: two kernels starting on one busy core
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(path).parent)}},
    )
    start = time.monotonic()
    if progress:

        def done(cell, cell_index, execute_reply, **_):
            if cell.cell_type == "code":
                say(
                    f"{out.name}/{Path(path).stem}: cell {cell_index} of {len(nb.cells)} done after "
                    f"{time.monotonic() - start:.0f} s"
                )

        client.on_cell_executed = done
    try:
        client.execute(env={**os.environ, "TMPDIR": str(tmp)})  # the kernel's, not ours
        seconds = time.monotonic() - start
        nbformat.write(nb, out / Path(path).name)
        leftovers = sorted(p.name for p in tmp.iterdir() if not p.name.startswith(CACHES))
    finally:  # in the system's temp, not under OUT_DIR: never left behind
        shutil.rmtree(tmp, ignore_errors=True)
    found = [f"{path} {p}" for p in problems_of(nb, committed, leftovers)]
    say(f"{path}: {len(found)} problem(s), {seconds:.0f} s (slowest: {slowest(nb)})")
    return found


def core_slices(jobs: int) -> list[list[int]]:
    """The cores split into ``jobs`` slices, one per job (a core may be shared when there are
    fewer cores than jobs)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cores:
        return [[] for _ in range(jobs)]
    share = max(1, len(cores) // jobs)
    return [cores[(i * share) % len(cores) :][:share] or cores[:share] for i in range(jobs)]


def own_cores(slices) -> None:
    """A job's process keeps to its slice of the cores, and so does the kernel it starts: two
    kernels that each take every core slow each other down many times over (torch's threads
    wait for each other by spinning), and a cell's time would measure the crowd."""
    share = slices.get()
    if share:
        os.sched_setaffinity(0, share)


USAGE = "usage: execute_notebooks.py [--same-checks] [--jobs N] [--progress] OUT_DIR NOTEBOOK [NOTEBOOK ...]"


def main(argv: list[str]) -> int:
    flags = {"--same-checks", "--progress"}
    same_checks, progress = "--same-checks" in argv, "--progress" in argv
    args, jobs = [a for a in argv if a not in flags], 1
    if "--jobs" in args:
        at = args.index("--jobs")
        value = args[at + 1] if at + 1 < len(args) else ""
        if not value.isdigit() or int(value) < 1:
            sys.exit(f"--jobs takes a whole number >= 1, got {value!r}\n{USAGE}")
        jobs, args = int(value), args[:at] + args[at + 2 :]
    if len(args) < 2:
        sys.exit(USAGE)
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if jobs == 1:
        failures = [p for path in args[1:] for p in run(path, out, same_checks, progress)]
    else:  # its own process per notebook: each client runs its own event loop and kernel
        context = get_context("spawn")
        slices = context.Queue()
        for share in core_slices(jobs):
            slices.put(share)
        with ProcessPoolExecutor(
            jobs, mp_context=context, initializer=own_cores, initargs=(slices,)
        ) as pool:
            runs = {
                path: pool.submit(run, path, out, same_checks, progress)
                for path in longest_first(args[1:])
            }
            failures = [p for path in args[1:] for p in runs[path].result()]
    print(
        "\n".join(failures)
        or "every cell of every notebook ran cleanly"
        + (", every self-check as in the committed run" if same_checks else "")
    )
    print(f"{len(args) - 1} notebook(s) in {time.monotonic() - start:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
