"""The device a conformance run puts its parameters on: ``unified-opt conformance
--device``, ``uo.conformance.check(..., device=...)``, the pytest plugin's
``--uo-device``.

A device is written ``cpu``, ``cuda`` (alias ``gpu``) or ``npu``, the accelerators with
an index (``cuda:1``; without one, index 0). Each backend spells it its own way
(:func:`framework_device`): torch ``cuda:N`` (``npu:N`` through the ``torch_npu``
package), Paddle ``gpu:N`` / ``npu:N``, MindSpore ``device_target`` ``GPU`` /
``Ascend`` with ``device_id`` N.

:func:`place` checks, in the process that runs the backend, that the framework can use
the device, and makes it the framework's default where the framework has one per
process (Paddle's ``paddle.set_device``, MindSpore's ``ms.set_device``; torch has none:
the torch driver moves each tensor). An unavailable device (no CUDA, a CPU-only build,
an index past the devices there are, ``npu`` without ``torch_npu``) is a
:class:`DeviceUnavailable` naming the device and the backend. The runner's parent
process imports no framework, so it asks each backend in a process of its own first
(:func:`probe`, ``python -m unified_opt.conformance.device BACKEND DEVICE``): an
unavailable device stops the run before any case runs.

On the CPU nothing is probed, and a framework already on its CPU (every CPU-only
build) is left exactly as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

#: the device kinds, as the command line writes them
KINDS = ("cpu", "cuda", "npu")
#: other spellings of a kind
ALIASES = {"gpu": "cuda"}
#: what the probe prints before its JSON (a framework may print on stdout as it loads)
PROBE_MARK = "uo-device "
#: seconds a probe may take (importing MindSpore and reading its devices: ~10 s)
PROBE_TIMEOUT = 300.0


class DeviceUnavailable(ValueError):
    """The device is written correctly, but the backend cannot use it here."""


@dataclass(frozen=True)
class Device:
    """A device as asked for: ``kind`` one of :data:`KINDS`, ``index`` (0 for an
    accelerator written without one; None for the CPU)."""

    kind: str
    index: int | None = None

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def is_cpu(self) -> bool:
        return self.kind == "cpu"


CPU = Device("cpu")


def parse_device(value, argument: str = "device") -> Device:
    """``value`` (``"cpu"``, ``"cuda"``, ``"gpu:1"``, ``"npu:0"``, or a :class:`Device`)
    as a :class:`Device`; TypeError for a wrong type, ValueError for a wrong value, each
    naming ``argument``."""
    if isinstance(value, Device):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str such as 'cpu', 'cuda' or 'cuda:1', got "
                        f"{value!r} of type {type(value).__name__}")
    kind, colon, index = value.strip().lower().partition(":")
    kind = ALIASES.get(kind, kind)
    if kind not in KINDS:
        raise ValueError(f"{argument} must be one of cpu, cuda (or gpu), npu, an "
                         f"accelerator with an index (cuda:1), got {value!r}")
    if not colon:
        return CPU if kind == "cpu" else Device(kind, 0)
    if kind == "cpu":
        raise ValueError(f"{argument}: the CPU takes no index, got {value!r} (write 'cpu')")
    if not index.isdigit():
        raise ValueError(f"{argument}: the index after {kind}: must be a number >= 0, got "
                         f"{value!r}")
    return Device(kind, int(index))


def framework_device(backend: str, device: Device) -> str:
    """``device`` as ``backend`` writes it: torch ``cuda:0``, Paddle ``gpu:0``, MindSpore
    ``GPU:0`` (its ``device_target`` and ``device_id``)."""
    if device.is_cpu:
        return {"mindspore": "CPU"}.get(backend, "cpu")
    names = {"torch": {"cuda": "cuda", "npu": "npu"},
             "paddle": {"cuda": "gpu", "npu": "npu"},
             "mindspore": {"cuda": "GPU", "npu": "Ascend"}}
    if backend not in names:
        raise ValueError(f"device: no device placement for backend {backend!r}")
    return f"{names[backend][device.kind]}:{device.index}"


@dataclass(frozen=True)
class Placement:
    """Where a backend runs a conformance run: ``device`` (as asked, ``cuda:0``),
    ``framework_device`` (the backend's spelling, ``gpu:0``) and ``name`` (the device's
    model: ``NVIDIA H200``, the CPU's)."""

    backend: str
    device: str
    framework_device: str
    name: str

    def to_dict(self) -> dict:
        return asdict(self)


def place(backend: str, device) -> Placement:
    """Check that ``backend`` can use ``device`` in this process and make it the
    framework's default where it has one (module doc); the :class:`Placement`.
    Imports the framework."""
    device = parse_device(device)
    where = framework_device(backend, device)
    if backend == "torch":
        name = _torch_device(device)
    elif backend == "paddle":
        name = _paddle_device(device, where)
    elif backend == "mindspore":
        name = _mindspore_device(device)
    else:
        raise ValueError(f"device: no device placement for backend {backend!r}")
    return Placement(backend, str(device), where, name)


def _unavailable(backend: str, device: Device, why: str) -> DeviceUnavailable:
    return DeviceUnavailable(f"device {device} is not available to {backend}: {why}")


def _check_index(backend: str, device: Device, count: int) -> None:
    if device.index >= count:
        seen = (f"{count} {device.kind} device(s), {device.kind}:0 to "
                f"{device.kind}:{count - 1}" if count else f"no {device.kind} device")
        raise _unavailable(backend, device, f"it sees {seen}")


def _cpu_name() -> str:
    from .html import cpu_name

    return cpu_name()


def _torch_device(device: Device) -> str:
    import torch

    if device.is_cpu:
        return _cpu_name()
    if device.kind == "cuda":
        if not torch.cuda.is_available():
            build = ("a CPU-only build" if torch.version.cuda is None
                     else f"built for CUDA {torch.version.cuda}")
            raise _unavailable("torch", device, f"torch {torch.__version__} ({build}) finds "
                               "no CUDA device (torch.cuda.is_available() is False)")
        _check_index("torch", device, torch.cuda.device_count())
        return torch.cuda.get_device_name(device.index)
    try:
        import torch_npu  # noqa: F401  (registers the "npu" device with torch)
    except ImportError:
        raise _unavailable("torch", device, "torch runs on Ascend NPUs through the "
                           "torch_npu package, which is not installed") from None
    if not torch.npu.is_available():
        raise _unavailable("torch", device, "torch_npu finds no NPU "
                           "(torch.npu.is_available() is False)")
    _check_index("torch", device, torch.npu.device_count())
    return torch.npu.get_device_name(device.index)


def _paddle_device(device: Device, where: str) -> str:
    import paddle

    if device.is_cpu:
        if paddle.device.get_device() != "cpu":     # a GPU build defaults to gpu:0
            paddle.set_device("cpu")
        return _cpu_name()
    if device.kind == "cuda":
        if not paddle.is_compiled_with_cuda():
            raise _unavailable("paddle", device, f"paddle {paddle.__version__} is a build "
                               "without CUDA (paddle.is_compiled_with_cuda() is False)")
        _check_index("paddle", device, paddle.device.cuda.device_count())
        name = paddle.device.cuda.get_device_name(device.index)
    else:
        if "npu" not in paddle.device.get_all_custom_device_type():
            raise _unavailable("paddle", device, "paddle has no npu device plugin "
                               "(paddle.device.get_all_custom_device_type() lists none)")
        found = [d for d in paddle.device.get_available_custom_device()
                 if d.startswith("npu")]
        _check_index("paddle", device, len(found))
        name = where
    paddle.set_device(where)
    return name


def _mindspore_device(device: Device) -> str:
    import mindspore as ms

    target = framework_device("mindspore", device).partition(":")[0]
    if device.is_cpu:
        if ms.get_context("device_target") != "CPU":   # a GPU/Ascend build's default
            ms.set_device("CPU")
        return _cpu_name()
    from mindspore import hal

    if not hal.is_available(target):
        raise _unavailable("mindspore", device, f"mindspore {ms.__version__} cannot run "
                           f"on {target} here (mindspore.hal.is_available({target!r}) is "
                           "False: a build without it, or no device)")
    _check_index("mindspore", device, hal.device_count(target))
    try:
        ms.set_device(target, device.index)
    except RuntimeError as error:      # the device_target was fixed before (one per process)
        raise _unavailable("mindspore", device, f"ms.set_device({target!r}, "
                           f"{device.index}) failed: {error}") from None
    return hal.get_device_name(device.index, target)


# -- asking a backend in a process of its own ---------------------------------------

def probe(backend: str, device, timeout: float = PROBE_TIMEOUT) -> Placement:
    """:func:`place` run in a fresh process of this interpreter (the caller imports no
    framework); :class:`DeviceUnavailable` with its message when the backend cannot use
    the device."""
    device = parse_device(device)
    command = [sys.executable, "-m", "unified_opt.conformance.device", backend, str(device)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _unavailable(backend, device, f"asking {backend} took over {timeout:g} s") \
            from None
    marked = [line[len(PROBE_MARK):] for line in done.stdout.splitlines()
              if line.startswith(PROBE_MARK)]
    if not marked:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise _unavailable(backend, device, f"asking {backend} failed (exit status "
                           f"{done.returncode}): {tail}")
    answer = json.loads(marked[-1])
    if "error" in answer:
        raise DeviceUnavailable(answer["error"])
    return Placement(**answer)


def probe_all(backends, device) -> dict[str, Placement]:
    """:func:`probe` for each backend at once (each imports its framework: seconds);
    one :class:`DeviceUnavailable` naming every backend that cannot use ``device``."""
    device = parse_device(device)
    backends = list(backends)
    with ThreadPoolExecutor(max_workers=max(1, len(backends))) as pool:
        futures = {b: pool.submit(probe, b, device) for b in backends}
    placements, errors = {}, []
    for backend, future in futures.items():
        try:
            placements[backend] = future.result()
        except DeviceUnavailable as error:
            errors.append(str(error))
    if errors:
        raise DeviceUnavailable("; ".join(errors))
    return placements


def main(argv=None) -> int:
    backend, device = (sys.argv[1:] if argv is None else argv)
    try:
        answer = place(backend, device).to_dict()
    except (DeviceUnavailable, ValueError, TypeError) as error:
        answer = {"error": str(error)}
    print(PROBE_MARK + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
