"""Host buffers that parameters' values and gradients pass through on their way to and
from a host update (:class:`.pipeline.HostPipeline`).

Two layouts, one interface (``fits``, ``reserve``, ``views``, ``generation``,
``lookahead``, ``pinned``):

* :class:`StagingRing` (the default): a few slots, each big enough for one batch of
  pieces, reused batch after batch. The pinned memory is fixed by the batch size (4 slots
  of 64 MiB, value and gradient halves, for the default 2**23 float32 elements), not by
  the model: buffers per parameter pin 8 bytes per float32 parameter element (56 GB for
  a 7B model), locked out of the rest of the host. A slot is written again only after
  the upload that reads it is done, so a ring lets the downloads run at most ``slots``
  batches ahead of the update. That bound should cost no overlap: with the default
  batches a slot's download (64 MiB, 1.2 ms at the 53 GB/s measured on an H100 host)
  has three batches' host update (about 5 ms there) to finish in. Measured on an H100
  (``benchmarks/offload_probe.py``): a step at 1.25x the host's fused Adam alone, where
  buffers per parameter took 1.48x in the same run.
* :class:`HostStaging`: a value and a gradient buffer per parameter, kept between steps:
  the downloads may all be queued at once, and the host still holds each value after the
  step (what ``HostPipeline(fetch_values=False)`` measures).

Where a GPU exists the buffers are pinned (what lets a copy run asynchronously), as
``pinning`` says (:data:`PINNING`); without one they are plain host memory.

A ring moves a batch as :data:`TRANSFERS` says: ``"copy-engine"``, one
``cudaMemcpyAsync`` per piece and direction (the GPU's copy engines; the host queues
each, about 5 us apiece); ``"kernel"``, ``torch._foreach_copy_`` kernels whose threads
read and write the pinned slots through the device's mapping of them (unified
addressing: a pinned page has the same address on the device), so a batch of many small
tensors costs the host one launch; ``"table"``, the same kernels' work done by one
Triton kernel a launch reading the addresses from a table (:mod:`.moves`: no views or
lists made per step, one small copy of the gradients' addresses instead; slower than
``"kernel"`` on an H100 and an H200: a Triton launch costs the host more). On an H100
``"kernel"`` transfers, one per batch and direction on two streams, cut the host's time
queueing a GPT-2-small step's copies from 5.9 to 2.2 ms, and the step against the copy
engines in the same run moved by -21% to +5% over thirteen pairs of rows (nine faster):
within the machines' run-to-run noise, so the copy engines stay a ring's default. With
batches of 2**21 elements kernel transfers read 1.25 and 1.28x the host's fused Adam in
the two latest probes (the copy engines with batches of 2**23: 1.36 and 1.50x), so
:class:`.offload.OffloadAdam` takes those (:func:`.offload.offload_adam_pipeline`).
Since then one kernel per batch both sends the batch just updated up and brings a later
one down, on one stream (one launch and one event a batch where there were two launches,
two events and a wait between streams): on H100s that default read 1.03 to 1.24x the
host's fused Adam alone (the copy engines with batches of 2**23 in the same runs: 1.28
to 1.66x), and 0.90 to 1.13x once each batch's arguments and pieces were kept between
steps (three H100 machine starts; copy engines 1.27 to 1.51x).
"""

from __future__ import annotations

import importlib.util
import weakref

import torch

from unified_opt import _validation as v

HOST = torch.device("cpu")

#: how staging buffers are pinned where a GPU exists: ``"alloc"``,
#: ``torch.zeros(..., pin_memory=True)``, which allocates with ``cudaHostAlloc`` and so
#: places every page in the memory of the thread that allocates; ``"register"``, pageable
#: zeros written by torch's thread pool, then ``cudaHostRegister``ed in place, so each page
#: stays near the threads that update it (on a host with several memory nodes). On the
#: one-node H100 host measured (``benchmarks/offload_probe.py``) neither was faster;
#: ``"alloc"`` is the default.
PINNING = ("alloc", "register")

#: byte alignment of each piece in a ring slot: a cache line, so every view starts aligned
#: for any dtype and vector width and no two pieces share a line. No coarser: torch pins
#: memory in power-of-two blocks, and a batch of 2**23 float32 elements whose pieces are
#: whole lines then fills a 64 MiB block exactly, where page padding would double it.
SLOT_ALIGNMENT = 64

#: how a :class:`StagingRing`'s batches cross the bus (the module's docstring)
TRANSFERS = ("copy-engine", "kernel", "table")


def _pin() -> bool:
    return torch.cuda.is_available()


def host_zeros_like(p) -> torch.Tensor:
    """Pageable host zeros of ``p``'s shape and dtype: state the host alone reads and
    writes needs no pinning (pinned pages are locked out of the rest of the system)."""
    return torch.zeros(p.shape, dtype=p.dtype, device=HOST)


def pinned_zeros_like(p) -> torch.Tensor:
    """Pinned host zeros of ``p``'s shape and dtype (plain host zeros where no GPU is):
    state a GPU reads and writes in place through its mapping of the pages."""
    return torch.zeros(p.shape, dtype=p.dtype, device=HOST, pin_memory=_pin())


def _synchronize(devices: list) -> None:
    for device in devices:
        torch.cuda.synchronize(device)


def _unregister(tensors: list) -> None:
    for tensor in tensors:
        torch.cuda.cudart().cudaHostUnregister(tensor.data_ptr())


class _PinnedZeros:
    """Makes host zeros, pinned as ``pinning`` says where a GPU exists; registered memory
    is unregistered before torch frees it (not at exit: the process's memory goes with
    it)."""

    def __init__(self, owner: str, pinning: str) -> None:
        v.check_choice(owner, "pinning", pinning, PINNING)
        self.pinning = pinning
        self._registered: list[torch.Tensor] = []
        weakref.finalize(self, _unregister, self._registered).atexit = False

    def zeros(self, shape, dtype) -> torch.Tensor:
        if not _pin():
            return torch.zeros(shape, dtype=dtype, device=HOST)
        if self.pinning == "alloc":
            return torch.zeros(shape, dtype=dtype, device=HOST, pin_memory=True)
        buffer = torch.zeros(shape, dtype=dtype, device=HOST)
        if buffer.numel():
            error = torch.cuda.cudart().cudaHostRegister(
                buffer.data_ptr(), buffer.numel() * buffer.element_size(), 0)
            torch.cuda.check_error(error)
            self._registered.append(buffer)
        return buffer

    def release(self, buffers: list[torch.Tensor]) -> None:
        """Unregister ``buffers`` (registered ones) before they are dropped."""
        dropped = {b.data_ptr() for b in buffers}
        _unregister([b for b in self._registered if b.data_ptr() in dropped])
        self._registered[:] = [b for b in self._registered if b.data_ptr() not in dropped]


def mapped_on_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CUDA tensor over the pinned, contiguous ``host`` tensor's bytes (its dtype and
    shape): the device's mapping of the same pages, at the same address (CUDA's unified
    addressing maps memory from ``cudaHostAlloc``, which pins torch's ``pin_memory``, so).
    A kernel reading or writing it crosses the bus. It keeps ``host`` alive."""
    nbytes = host.numel() * host.element_size()
    if nbytes == 0:     # no pages to map (torch does not pin an empty tensor)
        return torch.empty(host.shape, dtype=host.dtype, device=device)
    if not (host.is_pinned() and host.is_contiguous()):
        raise ValueError("mapped_on_device needs a pinned, contiguous host tensor")
    return torch.as_tensor(_Mapped(host, nbytes), device=device).view(host.dtype).view(
        host.shape)


class _Mapped:
    """CUDA's array interface over ``host``'s bytes; holds ``host`` (torch holds this
    object for the tensor it makes). A module-level class: an instance is in no
    reference cycle, so the pages go as soon as the last tensor over them does."""

    def __init__(self, host: torch.Tensor, nbytes: int) -> None:
        self.host = host
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (host.data_ptr(), False), "version": 3,
                                         "strides": None, "stream": None}


def _slot_views(slot, half: int, parts, offsets) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for (p, start, stop, whole), offset in zip(parts, offsets):
        nbytes = (stop - start) * p.element_size()
        shape = p.shape if whole else (stop - start,)
        value = slot[offset:offset + nbytes].view(p.dtype).view(shape)
        grad = slot[half + offset:half + offset + nbytes].view(p.dtype).view(shape)
        out.append((value, grad))
    return out


def _cut(value, grad, start, stop, whole):
    if whole:
        return value, grad
    return value.view(-1)[start:stop], grad.view(-1)[start:stop]


class HostStaging:
    """Per parameter: host buffers for its value and gradient, made once and kept."""

    #: views handed out stay valid: a parameter's buffers are never made again
    generation = 0
    #: each piece is its own copy (the buffers are not laid out for one kernel)
    transfer = "copy-engine"

    def __init__(self, pinning: str = "alloc") -> None:
        self._pinned = _PinnedZeros("HostStaging", pinning)
        self.pinning = pinning
        self._buffers: dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] = {}

    def buffers(self, p) -> tuple[torch.Tensor, torch.Tensor]:
        """``(host value, host gradient)`` buffers of ``p``, made once, contiguous."""
        if p not in self._buffers:
            self._buffers[p] = (self._pinned.zeros(p.shape, p.dtype),
                                self._pinned.zeros(p.shape, p.dtype))
        return self._buffers[p]

    def fits(self, batches) -> bool:
        """Whether views handed out stay valid through :meth:`reserve` (always)."""
        return True

    def reserve(self, batches) -> None:
        """Nothing to make ahead: each parameter's buffers are made on first use."""

    def views(self, batch_number: int, parts) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(host value, host gradient)`` for each ``(p, start, stop, whole)`` of a batch:
        the parameter's shape where whole, else the flat range ``start:stop``."""
        return [_cut(*self.buffers(p), start, stop, whole) for p, start, stop, whole in parts]

    def lookahead(self, batches: int) -> int:
        """How many batches may come down before the first is updated: all of them."""
        return batches

    def pinned(self) -> list[torch.Tensor]:
        """Every buffer made (pinned where a GPU exists)."""
        return [b for pair in self._buffers.values() for b in pair]


class StagingRing:
    """``slots`` reusable host buffers per parameter device; batch ``b`` passes through
    slot ``b % slots`` (values first, then gradients, each piece on a
    :data:`SLOT_ALIGNMENT` boundary).

    Each device has its own slots: the streams of two devices are not ordered with each
    other, so one device's downloads must not fill a slot another device's upload may
    still read. A slot grows to the largest batch it is given (a parameter that cannot
    be cut is a batch on its own). Growing frees the old slot once no view holds it (a
    :class:`.pipeline.HostPipeline` drops its kept views first: :meth:`fits`); a CUDA
    device is synchronized first, since an upload of its previous step may still read it.

    ``transfer`` is one of :data:`TRANSFERS`; ``"kernel"`` and ``"table"`` need
    ``pinning="alloc"`` (only ``cudaHostAlloc``'s pages are sure to have the same address
    on the device), ``"table"`` needs Triton.
    """

    def __init__(self, slots: int = 4, pinning: str = "alloc",
                 transfer: str = "copy-engine") -> None:
        if not isinstance(slots, int) or isinstance(slots, bool):
            raise TypeError(f"slots must be an int, got {type(slots).__name__}")
        if slots < 2:
            raise ValueError(f"slots must be at least 2 (one updated while the next comes "
                             f"down), got {slots}")
        v.check_choice("StagingRing", "transfer", transfer, TRANSFERS)
        self._pinned = _PinnedZeros("StagingRing", pinning)
        if transfer != "copy-engine" and pinning != "alloc":
            raise ValueError(f"transfer={transfer!r} needs pinning='alloc' (a registered "
                             f"page may have another address on the device), got "
                             f"{pinning!r}")
        if transfer == "table" and importlib.util.find_spec("triton") is None:
            raise ValueError("transfer='table' needs Triton (its kernel is Triton's); "
                             "install triton, or take transfer='kernel'")
        self.slots, self.pinning, self.transfer = slots, pinning, transfer
        self._slots: dict[torch.device, list[torch.Tensor]] = {}
        # transfer="kernel" or "table"
        self._aliases: dict[torch.device, list[torch.Tensor]] = {}
        if transfer != "copy-engine":
            # a kernel's read of a pinned slot is no copy torch's pinned-memory cache
            # waits for before it hands the pages out again: a ring dropped while its
            # uploads run waits for its devices first
            self._devices: list[torch.device] = []
            weakref.finalize(self, _synchronize, self._devices).atexit = False
        #: counts the times slots were made: views handed out before the last time may
        #: point at a freed slot
        self.generation = 0

    @staticmethod
    def _layout(parts) -> tuple[list[int], int]:
        """Each part's byte offset in a slot's value half, and the half's size."""
        offsets, size = [], 0
        for p, start, stop, _whole in parts:
            offsets.append(size)
            nbytes = (stop - start) * p.element_size()
            size += -(-nbytes // SLOT_ALIGNMENT) * SLOT_ALIGNMENT
        return offsets, size

    def _need(self, batches) -> list[int]:
        """The bytes each slot needs for ``batches``."""
        need = [0] * min(self.slots, len(batches))
        for number, parts in enumerate(batches):
            slot = number % self.slots
            need[slot] = max(need[slot], 2 * self._layout(parts)[1])
        return need

    def _too_small(self, slots, need) -> list[int]:
        return [k for k, nbytes in enumerate(need) if k < len(slots) and
                slots[k].numel() < nbytes]

    def fits(self, batches) -> bool:
        """Whether :meth:`reserve` for ``batches`` keeps every slot it has (it may add
        some): views into the slots stay valid."""
        if not batches:
            return True
        slots = self._slots.get(batches[0][0][0].device, [])
        return not self._too_small(slots, self._need(batches))

    def reserve(self, batches) -> None:
        """Slots for ``batches`` (non-empty lists of parts, all of one device): one per
        batch up to ``slots``, each big enough for the largest batch it takes (a tensor
        that cannot be cut makes one slot large, not all of them)."""
        if not batches:
            return
        device = batches[0][0][0].device
        slots = self._slots.setdefault(device, [])
        need = self._need(batches)
        small = self._too_small(slots, need)
        if small:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self._pinned.release([slots[k] for k in small])
            self._aliases.pop(device, None)     # they hold the old slots too
            for k in small:     # each old slot goes before its successor is pinned
                slots[k] = None
                slots[k] = self._pinned.zeros((need[k],), torch.uint8)
        added = range(len(slots), len(need))
        for k in added:
            slots.append(self._pinned.zeros((need[k],), torch.uint8))
        if small or added:
            self.generation += 1
            if self.transfer != "copy-engine" and device.type == "cuda":
                self._aliases[device] = [mapped_on_device(slot, device) for slot in slots]
                if device not in self._devices:
                    self._devices.append(device)

    def views(self, batch_number: int, parts) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``(host value, host gradient)`` for each ``(p, start, stop, whole)`` of batch
        ``batch_number``, in its slot (call :meth:`reserve` for the step's batches first)."""
        offsets, half = self._layout(parts)
        slot = self._slots[parts[0][0].device][batch_number % self.slots]
        return _slot_views(slot, half, parts, offsets)

    def device_views(self, batch_number: int, parts) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """What :meth:`views` gives, as CUDA tensors over the same pinned bytes (the
        device's mapping of the slot; ``transfer="kernel"`` or ``"table"`` on a CUDA device
        only)."""
        offsets, half = self._layout(parts)
        alias = self._aliases[parts[0][0].device][batch_number % self.slots]
        return _slot_views(alias, half, parts, offsets)

    def lookahead(self, batches: int) -> int:
        """How many batches may come down before the first is updated: one per slot on
        the copy engines (a download waits for the upload out of its slot on the other
        stream); one less with ``transfer="kernel"`` or ``"table"``, whose kernel sends one
        slot up while it fills another."""
        return min(self.slots - (self.transfer != "copy-engine"), batches)

    def pinned(self) -> list[torch.Tensor]:
        """Every slot of every device (pinned where a GPU exists)."""
        return [slot for slots in self._slots.values() for slot in slots]
