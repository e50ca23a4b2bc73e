"""Helper workers: a second worker process for a backend whose first one still has many
cases ahead when a job slot falls free, so that the run's slots end together.

The runner starts one worker per backend, the longest first (:data:`.runner.START_ORDER`)
and, behind them in the same pool of ``jobs`` slots, one helper task per backend. A
helper task that gets a slot looks at the backends whose worker runs and has no helper
yet, takes the one with the most cases nobody has claimed, and, when at least
:data:`HELPER_MIN_CASES` are left, starts a second worker for it; else it ends at once
(the next one looks again). The workers of a backend claim each case before running it
(:func:`.worker.claim`: one file per case, created exclusively, holding the claiming
worker's shard number), so every case runs exactly once, in one of them, with the same
driver, oracle, floors and verdict as in a worker of its own: the results are the same.

A helper costs a framework import (CPU seconds of importing the worker's driver: torch
3.1, Paddle 1.7, MindSpore 2.4, measured on the project's 2-core machine), hence the
minimum.

:class:`Tally` keeps a backend's shards together for the progress lines (one count of
runs done over the backend's total, one ``finished`` line when its last worker ends);
:func:`merge` makes the report's one entry per backend from its shards' entries.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

#: the fewest unclaimed cases of a backend for which a helper worker starts
HELPER_MIN_CASES = 12
CLAIMS = "claims"                  # under the run's working files: one folder per backend


def claims_folder(work: Path, backend: str) -> Path:
    return work / CLAIMS / backend


def claimed(folder: Path) -> dict[str, int | None]:
    """case id -> the shard that claimed it (None: a worker ended between creating the
    claim and writing its number)."""
    if not folder.is_dir():
        return {}
    owners: dict[str, int | None] = {}
    for file in folder.iterdir():
        text = file.read_text().strip()
        owners[file.name] = int(text) if text.isdigit() else None
    return owners


class Tally:
    """One backend's workers as the progress lines see them: runs done of ``total``
    over all its shards, and which shards run."""

    def __init__(self, backend: str, cases: list[str], total: int, claims: Path,
                 progress: Callable[[str], None]):
        self.backend, self.cases, self.total, self.claims = backend, cases, total, claims
        self.progress = progress
        self.lock = threading.Lock()
        self.done = 0
        self.running = 0              # workers of the backend now running
        self.shards = 0               # workers of the backend started so far
        self.started: float | None = None
        self.endings: list[str | None] = []

    def unclaimed(self) -> int:
        return len(self.cases) - len(claimed(self.claims))

    def begin(self) -> int:
        """A worker of the backend starts: its shard number."""
        with self.lock:
            if self.started is None:
                self.started = time.perf_counter()
            self.running += 1
            self.shards += 1
            return self.shards - 1

    def numbered(self, rest: str) -> str:
        """A worker's ``progress I/T ...`` line's rest with the backend's count."""
        with self.lock:
            self.done += 1
            _, _, after = rest.partition(" ")
            return f"{self.done}/{self.total} {after}"

    def end(self, ending: str | None) -> str | None:
        """A worker ended (``ending``: how, None for exit status 0): the backend's
        ``finished`` line once its last worker ended, else None."""
        with self.lock:
            self.running -= 1
            self.endings.append(ending)
            if self.running:
                return None
            seconds = time.perf_counter() - (self.started or time.perf_counter())
            failed = [e for e in self.endings if e is not None]
            workers = f" by {self.shards} workers" if self.shards > 1 else ""
            return (f"finished in {seconds:.1f} s{workers} "
                    + (f"(the worker {failed[0]})" if failed else "(exit status 0)"))


class Helpers:
    """Which backend a helper task helps (see the module)."""

    def __init__(self, tallies: dict[str, Tally], minimum: int | None = None):
        self.tallies = tallies
        self.minimum = HELPER_MIN_CASES if minimum is None else minimum
        self.lock = threading.Lock()
        self.helped: set[str] = set()

    def choose(self) -> tuple[str, int] | None:
        """The backend to help and the helper's shard number (registered as running
        with the backend's first worker, which cannot end meanwhile without this tally
        seeing it), or None."""
        with self.lock:
            best, most = None, self.minimum - 1
            for name, tally in self.tallies.items():
                with tally.lock:
                    live = tally.running > 0 and name not in self.helped
                if live and (left := tally.unclaimed()) > most:
                    best, most = name, left
            if best is None:
                return None
            tally = self.tallies[best]
            with tally.lock:
                if tally.running == 0:            # its worker ended while we counted
                    return None
                tally.running += 1
                tally.shards += 1
                shard = tally.shards - 1
            self.helped.add(best)
            return best, shard


#: a shard's entry keys that are lists, concatenated in the backend's entry
LISTS = ("logs", "trajectories_dropped", "not_run")


def merge(shards: list[dict]) -> dict:
    """A backend's entry for the report from its shards' entries (the first worker's
    first): one shard's entry as it is; else the first's with ``seconds`` the sum of
    the shards' (the backend's work), ``exit_code`` the first non-zero, ``error`` the
    failing shards' errors, the lists joined, and ``shards`` (each one's seconds, exit
    status and error)."""
    if len(shards) == 1:
        return shards[0]
    first = shards[0]
    merged = {**first, "seconds": round(sum(s["seconds"] for s in shards), 2),
              "exit_code": next((s["exit_code"] for s in shards if s["exit_code"]),
                                first["exit_code"])}
    errors = [f"worker {i + 1} of {len(shards)}: {s['error']}"
              for i, s in enumerate(shards) if s["error"]]
    merged["error"] = "\n".join(errors) or None
    for key in LISTS:
        merged[key] = [item for s in shards for item in s[key]]
    merged["shards"] = [{"seconds": s["seconds"], "exit_code": s["exit_code"],
                         "error": s["error"]} for s in shards]
    return merged
