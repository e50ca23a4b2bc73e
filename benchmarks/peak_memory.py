"""This process's resident memory and its peak, read from Linux's ``/proc/self/status``:
what the memory benchmarks of this folder measure (imported by them as a sibling
module)."""

from __future__ import annotations

from pathlib import Path


def status_mib(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of this process, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> None:
    """Start ``VmHWM`` again from the resident size now (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")
