"""What ``unified-opt conformance`` prints while it runs: a compact progress display.

The runner relays its workers' lines (``[backend] start N cases, up to T runs, ...``,
``[backend] I/T CASE PATH STATUS [detail]`` after each run, ``[backend] finished in S
s ...``, and anything else a backend reports). :class:`ProgressDisplay` turns them into

* on a terminal: one updating line per backend (``rich``): a bar, runs done of the
  total, failures and errors so far, the elapsed time and the run just finished;
* elsewhere (a CI log, a pipe): plain lines, one per backend when it starts, then at
  most one every ``every`` seconds (runs done, counts so far), and one when it ends;
* in both: every failing or erroring run and every other backend message at once, on
  a line of its own.

``verbose`` prints every line as the runner gives it (the full per-run log).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

#: seconds between a backend's plain progress lines
EVERY = 30.0
PROBLEMS = ("fail", "error")


@dataclass
class BackendProgress:
    total: int = 0
    done: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    last: str = ""
    started: float = field(default_factory=time.monotonic)
    printed: float = 0.0

    def counted(self) -> str:
        order = ("pass", "skipped", "fail", "error")
        keys = [k for k in order if k in self.counts] + sorted(set(self.counts) - set(order))
        return ", ".join(f"{self.counts[k]} {k}" for k in keys) or "nothing finished"


class ProgressDisplay:
    """A ``progress`` callback for :func:`unified_opt.conformance.runner.run`; call
    :meth:`close` when the run ends (a context manager does)."""

    def __init__(self, stream: TextIO | None = None, *, interactive: bool | None = None,
                 verbose: bool = False, every: float = EVERY):
        self.stream = sys.stdout if stream is None else stream
        if interactive is None:
            interactive = bool(getattr(self.stream, "isatty", lambda: False)())
        self.verbose, self.every = verbose, every
        self.backends: dict[str, BackendProgress] = {}
        self._bars = None
        if interactive and not verbose:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.table import Column

            # the last run's text takes what width is left, cut with an ellipsis
            last = Column(ratio=1, no_wrap=True, overflow="ellipsis")
            self._bars = Progress(TextColumn("[bold]{task.description:<10}"),
                                  BarColumn(bar_width=20), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("{task.fields[counts]}"),
                                  TextColumn("{task.fields[last]}", table_column=last),
                                  console=Console(file=self.stream), expand=True)
            self._tasks: dict[str, int] = {}
            self._bars.start()

    def __enter__(self) -> "ProgressDisplay":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None

    def _print(self, text: str) -> None:
        if self._bars is not None:
            self._bars.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def __call__(self, line: str) -> None:
        if self.verbose:
            self._print(line)
            return
        backend, _, rest = line.partition("] ")
        backend = backend.lstrip("[")
        if not line.startswith("[") or not rest:
            self._print(line)
            return
        words = rest.split(maxsplit=4)
        if words[0] == "start":
            self._start(backend, rest)
        elif "/" in words[0] and words[0].split("/")[0].isdigit() and len(words) >= 4:
            self._run(backend, words)
        elif words[0] == "finished":
            self._finish(backend, rest)
        else:                                      # a backend's own message: as it is
            self._print(line)

    def _start(self, backend: str, rest: str) -> None:
        words = rest.split()
        total = int(words[words.index("to") + 1]) if "to" in words else 0
        state = self.backends[backend] = BackendProgress(total=total)
        if self._bars is not None:
            self._tasks[backend] = self._bars.add_task(backend, total=total, counts="",
                                                       last="")
        else:
            state.printed = time.monotonic()
            self._print(f"[{backend}] {rest}")

    def _run(self, backend: str, words: list[str]) -> None:
        state = self.backends.setdefault(backend, BackendProgress())
        done, _, total = words[0].partition("/")
        state.done, state.total = int(done), int(total)
        case, path, status = words[1], words[2], words[3]
        state.counts[status] = state.counts.get(status, 0) + 1
        state.last = f"{case} ({path})"
        if status in PROBLEMS:
            detail = words[4] if len(words) > 4 else ""
            self._print(f"[{backend}] {status.upper()} {case} ({path}): {detail}")
        if self._bars is not None:
            problems = ", ".join(f"{state.counts[k]} {k}" for k in PROBLEMS
                                 if state.counts.get(k))
            self._bars.update(self._tasks[backend], completed=state.done, total=state.total,
                              counts=problems, last=state.last)
        elif time.monotonic() - state.printed >= self.every:
            state.printed = time.monotonic()
            self._print(f"[{backend}] {state.done}/{state.total} runs ({state.counted()}), "
                        f"{time.monotonic() - state.started:.0f} s")

    def _finish(self, backend: str, rest: str) -> None:
        state = self.backends.setdefault(backend, BackendProgress())
        if self._bars is not None and backend in self._tasks:
            self._bars.update(self._tasks[backend], completed=state.done, last=rest)
        elif state.total or state.done:
            self._print(f"[{backend}] {state.done}/{state.total} runs ({state.counted()}); "
                        f"{rest}")
        else:        # it ended before it said how many runs it had ("0/0 runs" said nothing)
            self._print(f"[{backend}] no run started; {rest}")
