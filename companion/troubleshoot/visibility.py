"""``CUDA_VISIBLE_DEVICES``: which GPUs a process sees, and what it calls them.

Used in: the troubleshooting appendix.

The CUDA runtime reads ``CUDA_VISIBLE_DEVICES`` once, when a process first
uses CUDA. It lists the physical GPUs the process may use, in order, and the
process numbers them from 0: with ``CUDA_VISIBLE_DEVICES=2,3`` physical
GPU 2 is ``cuda:0``. An index that does not exist ends the list (the GPUs
before it stay visible, the ones after it do not), and an empty value hides
every GPU. :func:`visible_devices` applies this rule on paper;
:func:`cuda_view` asks a fresh Python process what it actually sees, since
changing the variable in a process that already uses CUDA has no effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..core.checks import check_positive

__all__ = ["visible_devices", "cuda_view"]

_PROBE = """
import json, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(json.dumps({"count": n, "names": [torch.cuda.get_device_name(i) for i in range(n)],
                  "uuids": [str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]}))
"""


def visible_devices(value: str | None, physical: int) -> dict[int, int]:
    """``{cuda index in the process: physical GPU index}`` for ``CUDA_VISIBLE_DEVICES=value``.

    ``value`` None (unset) shows all ``physical`` GPUs. Only comma-separated
    indices are modelled (not GPU UUIDs, nor an index listed twice); an
    index that is not a GPU ends the list, as the CUDA documentation says.
    """
    if type(physical) is not int or physical < 0:
        raise ValueError(f"physical must be the number of GPUs (>= 0), got {physical!r}")
    if value is None:
        return {i: i for i in range(physical)}
    if not isinstance(value, str):
        raise TypeError(f"CUDA_VISIBLE_DEVICES is a string such as '1,0', got {value!r}")
    seen: list[int] = []
    for item in value.split(","):
        item = item.strip()
        if item.startswith(("GPU-", "MIG-")):
            raise ValueError(f"{item!r} is a UUID: only numeric indices are modelled here")
        if item.isdigit() and int(item) in seen:
            raise ValueError(f"GPU {item} is listed twice in {value!r}: list each GPU once")
        if not item.isdigit() or int(item) >= physical:
            break
        seen.append(int(item))
    return dict(enumerate(seen))


def cuda_view(value: str | None, timeout: float = 60.0) -> dict:
    """What a new Python process sees with ``CUDA_VISIBLE_DEVICES=value`` (None: unset).

    Returns ``{"count": ..., "names": [...], "uuids": [...]}`` for its
    ``cuda:0``, ``cuda:1``... The UUIDs tell which physical GPU each one is.
    """
    _check_cuda_view(value, timeout)
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if value is not None:
        env["CUDA_VISIBLE_DEVICES"] = value
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the probe process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_cuda_view(value, timeout: float) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(
            f"value must be a CUDA_VISIBLE_DEVICES string such as '1,0', or None (unset), got {value!r}"
        )
    check_positive(timeout, "timeout", "give the seconds the child may take")
