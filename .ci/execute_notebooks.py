"""Execute every chapter into a folder (the committed notebooks stay as they are).

Used by ``make gpu-check``: ``python .ci/execute_notebooks.py OUT_DIR book/*.ipynb``.
Every cell runs, even after an error, so one run lists every failing cell;
the exit status is 1 if any cell raised, with each failure printed.
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(out_dir: str, *paths: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    failures = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        start = time.monotonic()
        client = NotebookClient(nb, timeout=900, allow_errors=True, kernel_name="python3",
                                resources={"metadata": {"path": str(Path(path).parent)}})
        client.execute()
        nbformat.write(nb, out / Path(path).name)
        errors = [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code"
                  for o in c.get("outputs", []) if o.get("output_type") == "error"]
        print(f"{path}: {len(errors)} cell error(s), {time.monotonic() - start:.0f} s", flush=True)
        for i, o in errors:
            failures.append(f"{path} cell {i}: {o['ename']}: {o['evalue'][:300]}")
    print("\n".join(failures) or "every cell of every chapter ran without an error")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
