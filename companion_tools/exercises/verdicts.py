"""The verdicts a checker prints and returns: one line per case, true when all passed."""

from __future__ import annotations

import textwrap

__all__ = ["Verdicts", "attempt"]


class Verdicts:
    """The cases a checker ran: ``add`` prints ``<case>: True`` (or ``False`` and why).

    ``bool(verdicts)`` is true when every case passed; ``failed`` lists the cases
    that did not. ``quiet=True`` collects without printing (the tests use it).
    """

    def __init__(self, title: str, quiet: bool = False):
        self.title, self.quiet = title, quiet
        self.cases: list[tuple[str, bool, str]] = []
        self.notes: list[str] = []  # the measurements printed beside the verdicts
        self._say(title)

    def _say(self, text: str, indent: str = "") -> None:
        if not self.quiet:
            print(textwrap.fill(text, 96, initial_indent=indent, subsequent_indent=indent + "    "))

    def add(self, case: str, ok: bool, why: str = "") -> bool:
        """Record one case; ``why`` (what to look at) is printed only when it failed."""
        ok = bool(ok)
        self.cases.append((case, ok, why))
        self._say(f"{case}: {ok}" + ("" if ok or not why else f" ({why})"), "  ")
        return ok

    def note(self, text: str) -> None:
        """Print a measurement beside the verdicts (not a verdict)."""
        self.notes.append(text)
        self._say(text, "  ")

    @property
    def failed(self) -> list[str]:
        return [case for case, ok, _ in self.cases if not ok]

    def __bool__(self) -> bool:
        return bool(self.cases) and not self.failed

    def __repr__(self) -> str:
        return f"Verdicts({self.title!r}: {len(self.cases) - len(self.failed)}/{len(self.cases)} passed)"


def attempt(fn, *args, **kwargs) -> tuple[object, str]:
    """``(fn(*args, **kwargs), "")``, or ``(None, "raised <error>")``: an answer that raises
    fails its case, with the error's message, and the checker goes on with the next."""
    try:
        return fn(*args, **kwargs), ""
    except Exception as err:  # the reader's code: any error is a failed case
        lines = str(err).strip().splitlines()  # a worker's error ends with the cause
        return None, f"raised {type(err).__name__}: {lines[-1] if lines else ''}"
