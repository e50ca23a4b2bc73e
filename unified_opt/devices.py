"""Which devices each backend's paths have been verified on, and the warning a build
gives on one that has not (docs/devices.md says the same with the figures).

Verified means: the conformance suite passed there (``unified-opt conformance
--device ...``) and the device's tests ran, as recorded in ``benchmarks/results``. A
build on any other device works as the framework allows but says so once per process
and device, rather than letting the library's claims be assumed there.
"""

from __future__ import annotations

import warnings
from pathlib import Path

#: (backend, device type) pairs the conformance suite and the device tests passed on
VERIFIED = {
    ("torch", "cpu"): "every path (2-core x86-64 CPUs, with and without AVX-512)",
    ("torch", "cuda"): "native classes and the own path's CUDA kernels (NVIDIA H200 and "
                       "H100, torch 2.11 + CUDA 13.0, Triton 3.6: benchmarks/results/"
                       "gpu_conformance.md)",
    ("paddle", "cpu"): "every path",
    ("mindspore", "cpu"): "every path, PyNative and GRAPH_MODE",
}

_warned: set = set()


def cpu_info(path: str | Path = "/proc/cpuinfo") -> tuple[str | None, tuple[str, ...]]:
    """This machine's CPU model and feature flags as ``path`` (Linux's ``/proc/cpuinfo``)
    lists them: the first model line's value (x86's ``model name``, Arm's ``Model``,
    POWER's ``cpu``) and the flags of every flag line (x86's ``flags``, Arm's
    ``Features``) in the order first listed. ``(None, ())`` where it cannot be read
    (macOS, Windows)."""
    model, flags = None, {}
    try:
        with open(path, encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if model is None and key in ("model name", "Model", "cpu") and value:
                    model = value
                elif key in ("flags", "Features"):
                    flags.update(dict.fromkeys(value.split()))
    except OSError:
        pass
    return model, tuple(flags)


class UnverifiedDeviceWarning(UserWarning):
    """A build on a device the library's conformance suite has not been run on."""


def check_device(backend: str, device: str) -> None:
    """Warn once per process if ``backend``'s parameters live on ``device`` (its type,
    e.g. ``"gpu"``, ``"mps"``, ``"Ascend"``) and that pair is not in :data:`VERIFIED`."""
    key = (backend, device.split(":")[0].lower())
    if key in VERIFIED or key in _warned:
        return
    _warned.add(key)
    warnings.warn(f"unified_opt: {backend} on {device} has not been verified by the "
                  f"conformance suite (docs/devices.md); run `unified-opt conformance "
                  f"--device {device} --backends {backend}` there before relying on it",
                  UnverifiedDeviceWarning, stacklevel=4)
