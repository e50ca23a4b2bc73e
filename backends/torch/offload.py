"""Host offload for torch: optimizer state in host memory, the update computed there,
only the new parameter values written back to the parameter's device.

:class:`OffloadAdam` runs torch's fused CPU Adam kernel (``torch.optim.adam.adam(...,
fused=True)``) over host state. The transfers are two pieces shared with
``SpecOptimizer(offload=True)`` (any spec's own update on the host):

* :class:`HostStaging`: one parameter at a time, synchronously (fetch, update, write back);
* :class:`HostPipeline`: the parameters cut into batches, each batch's gradient (and
  value) copied down on a side CUDA stream while the host updates the batch before it and
  the batch before that goes back up on another, on pinned host buffers.

A parameter that already lives on the CPU is updated in place: no copy. Where a GPU exists
the host buffers are pinned, so the copies can run asynchronously.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable

import torch
from torch.optim import adam as torch_adam

HOST = torch.device("cpu")

#: element boundary at which :class:`HostPipeline` may cut a parameter. A multiple of any
#: vector width, so that torch's fused CPU kernels (which run whole vectors from the start
#: of a tensor and a scalar tail at its end) compute every element of a piece exactly as
#: they do in the whole tensor.
PIECE_ALIGNMENT = 1 << 16


#: how :class:`HostStaging` pins its buffers where a GPU exists (pinned memory is what lets
#: a copy run asynchronously): ``"alloc"``, ``torch.zeros(..., pin_memory=True)``, which
#: allocates with ``cudaHostAlloc`` and so places every page in the memory of the thread
#: that allocates; ``"register"``, pageable zeros written by torch's thread pool, then
#: ``cudaHostRegister``ed in place, so each page stays near the threads that update it
#: (on a host with several memory nodes). On the one-node H100 host measured
#: (``benchmarks/offload_probe.py``) neither was faster; ``"alloc"`` is the default.
PINNING = ("alloc", "register")


def _pin() -> bool:
    return torch.cuda.is_available()


def host_zeros_like(p) -> torch.Tensor:
    """Pageable host zeros of ``p``'s shape and dtype: state the host alone reads and
    writes needs no pinning (pinned pages are locked out of the rest of the system)."""
    return torch.zeros(p.shape, dtype=p.dtype, device=HOST)


def _unregister(tensors: list) -> None:
    for tensor in tensors:
        torch.cuda.cudart().cudaHostUnregister(tensor.data_ptr())


class HostStaging:
    """Per device parameter: host buffers for its value and gradient (pinned where a GPU
    exists, as ``pinning`` says: see :data:`PINNING`)."""

    def __init__(self, pinning: str = "alloc") -> None:
        if not isinstance(pinning, str):
            raise TypeError(f"pinning must be a str, got {type(pinning).__name__}")
        if pinning not in PINNING:
            raise ValueError(f"pinning must be one of {PINNING}, got {pinning!r}")
        self.pinning = pinning
        self._buffers: dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] = {}
        self._registered: list[torch.Tensor] = []
        # registered memory is unregistered before torch frees it (not at exit: the
        # process's memory goes with it)
        weakref.finalize(self, _unregister, self._registered).atexit = False

    def _buffer(self, p) -> torch.Tensor:
        if not _pin():
            return host_zeros_like(p)
        if self.pinning == "alloc":
            return torch.zeros(p.shape, dtype=p.dtype, device=HOST, pin_memory=True)
        buffer = host_zeros_like(p)
        if buffer.numel():
            error = torch.cuda.cudart().cudaHostRegister(
                buffer.data_ptr(), buffer.numel() * buffer.element_size(), 0)
            torch.cuda.check_error(error)
            self._registered.append(buffer)
        return buffer

    def buffers(self, p) -> tuple[torch.Tensor, torch.Tensor]:
        """``(host value, host gradient)`` buffers of ``p``, made once, contiguous."""
        if p not in self._buffers:
            self._buffers[p] = (self._buffer(p), self._buffer(p))
        return self._buffers[p]

    def fetch(self, p) -> tuple[torch.Tensor, torch.Tensor]:
        """``(host value, host gradient)`` of ``p`` (``p`` itself on the CPU)."""
        if p.device.type == "cpu":
            return p.detach(), p.grad
        value, grad = self.buffers(p)
        value.copy_(p.detach())     # synchronous: the host computes on it next
        grad.copy_(p.grad)
        return value, grad

    @staticmethod
    def write_back(p, value) -> None:
        """The new value onto ``p``'s device (a no-op when it is ``p`` itself)."""
        if value is not p and value.data_ptr() != p.data_ptr():
            p.copy_(value, non_blocking=value.is_pinned())


@dataclass
class Piece:
    """A parameter, or a flat element range of it, as the host update sees it.

    ``value`` and ``grad`` are host tensors the update reads and writes in place (the
    parameter and its gradient themselves for a CPU parameter). A whole piece has the
    parameter's shape; a cut piece is the flat range ``start:stop`` (elementwise updates
    only: see :class:`HostPipeline`'s ``split``).
    """

    index: int              # position in the parameter list given to HostPipeline.run
    param: torch.Tensor
    start: int
    stop: int
    whole: bool
    value: torch.Tensor
    grad: torch.Tensor
    device_value: torch.Tensor | None = None    # None: the parameter lives on the CPU
    device_grad: torch.Tensor | None = None

    def flat(self, host_tensor: torch.Tensor) -> torch.Tensor:
        """This piece of a host tensor shaped like the parameter (its state, say)."""
        return host_tensor if self.whole else host_tensor.view(-1)[self.start:self.stop]


def plan_pieces(sizes, splittable, batch_elements: int, first_batch_elements: int):
    """Batches of ``(index, start, stop)`` over parameters of ``sizes`` elements, in order.

    Consecutive parameters share a batch up to ``batch_elements`` (one host call for many
    small tensors); a splittable parameter larger than the room left is cut at multiples
    of :data:`PIECE_ALIGNMENT`. The first batch holds at most ``first_batch_elements``,
    the next twice that and so on up to ``batch_elements``: the host starts computing
    once a small batch is down, while the larger ones are still on their way.
    """
    if batch_elements < PIECE_ALIGNMENT or first_batch_elements < PIECE_ALIGNMENT:
        raise ValueError(f"batch sizes must be at least {PIECE_ALIGNMENT} elements")
    batches, current = [], []
    limit = min(first_batch_elements, batch_elements)
    room = limit

    def close():
        nonlocal current, limit, room
        batches.append(current)
        current = []
        limit = min(2 * limit, batch_elements)
        room = limit

    for index, (numel, split) in enumerate(zip(sizes, splittable)):
        if numel == 0:
            current.append((index, 0, 0))   # still stepped: its step count advances
            continue
        start = 0
        while start < numel:
            take = numel - start
            if take > room:
                if split:       # room >= PIECE_ALIGNMENT here: a full batch was closed
                    take = room // PIECE_ALIGNMENT * PIECE_ALIGNMENT
                elif current:
                    close()
                    continue
            current.append((index, start, start + take))
            room -= take
            start += take
            if room < PIECE_ALIGNMENT:
                close()
    if current:
        batches.append(current)
    return batches


class HostPipeline:
    """The host-update loop with its transfers overlapped, per parameter device.

    ``run(params, update)`` calls ``update(batch)`` for each batch of :class:`Piece`
    (host value and gradient filled in), then sends the batch's new values to their
    parameters. On a CUDA device the copies run on two side streams: every batch's value
    and gradient go down at once, in order, each batch with an event the host waits for
    before updating it; each updated batch goes up as soon as it is done. So batch i+1
    comes down while the host updates batch i and batch i-1 goes up. The stream that
    called ``run`` waits for the uploads (later work on it sees the new values) and the
    host does not. Parameters on the CPU are one batch of whole pieces, no copies.

    ``split=True`` lets a large parameter be cut into flat pieces (elementwise updates
    only, such as Adam; a norm or a factored moment needs the whole tensor). The value
    comes down with the gradient so that a parameter changed on the device between steps
    (a loaded checkpoint, an edited weight) is what the host updates.

    ``stage_cpu=True`` stages CPU parameters through the host buffers too, with plain
    copies: the batching runs where no GPU is, for tests.

    ``fetch_values`` (True) brings each value down with its gradient. False is for
    measuring what that transfer costs (``benchmarks/gpu_step_time.py``): the host then
    updates the values it holds, and a change made to a parameter on its device is lost.
    Nothing in the library builds a pipeline with False: torch cannot see every such
    change (a write through ``p.data`` moves no version counter).
    """

    def __init__(self, *, split: bool = False, batch_elements: int = 1 << 23,
                 first_batch_elements: int = 1 << 20, stage_cpu: bool = False,
                 staging: HostStaging | None = None, fetch_values: bool = True) -> None:
        self.split = split
        self.fetch_values = fetch_values
        self.batch_elements = batch_elements
        self.first_batch_elements = first_batch_elements
        self.stage_cpu = stage_cpu
        self.staging = HostStaging() if staging is None else staging
        self._streams: dict[torch.device, tuple] = {}

    def run(self, params, update: Callable[[list[Piece]], None]) -> None:
        params = list(params)
        by_device: dict[torch.device, list[int]] = {}
        for i, p in enumerate(params):
            by_device.setdefault(p.device, []).append(i)
        for device, indices in by_device.items():
            if device.type == "cpu" and not self.stage_cpu:
                update([Piece(i, params[i], 0, params[i].numel(), True, params[i].detach(),
                              params[i].grad) for i in indices])
            else:
                self._run_staged(device, [(i, params[i]) for i in indices], update)

    def batches(self, indexed) -> list[list[Piece]]:
        """The batches of pieces for ``(index, parameter)`` pairs on one device."""
        def splittable(p) -> bool:
            return self.split and p.is_contiguous() and p.grad.is_contiguous()

        plan = plan_pieces([p.numel() for _, p in indexed], [splittable(p) for _, p in indexed],
                           self.batch_elements, self.first_batch_elements)
        out = []
        for batch in plan:
            pieces = []
            for k, start, stop in batch:
                index, p = indexed[k]
                value, grad = self.staging.buffers(p)
                whole = start == 0 and stop == p.numel()
                device_value, device_grad = p.detach(), p.grad
                if not whole:
                    value, grad = value.view(-1)[start:stop], grad.view(-1)[start:stop]
                    device_value = device_value.view(-1)[start:stop]
                    device_grad = device_grad.view(-1)[start:stop]
                pieces.append(Piece(index, p, start, stop, whole, value, grad, device_value,
                                    device_grad))
            out.append(pieces)
        return out

    def _run_staged(self, device, indexed, update) -> None:
        batches = self.batches(indexed)
        if device.type == "cuda":
            self._run_streamed(device, batches, update, torch.cuda)
            return
        for batch in batches:           # stage_cpu: the same loop, plain copies
            for piece in batch:
                piece.value.copy_(piece.device_value)
                piece.grad.copy_(piece.device_grad)
            update(batch)
            for piece in batch:
                piece.device_value.copy_(piece.value)

    def _run_streamed(self, device, batches, update, cuda) -> None:
        """The overlapped loop; ``cuda`` is ``torch.cuda`` (a stand-in in a CPU test)."""
        with cuda.device(device):
            down, up = self._side_streams(device, cuda)
            caller = cuda.current_stream(device)
            # the gradients, and any change to the values, are work queued on the caller's
            # stream; the uploads overwrite values that work may still read
            down.wait_stream(caller)
            up.wait_stream(caller)
            arrived = []
            with cuda.stream(down):
                for batch in batches:
                    for piece in batch:
                        if self.fetch_values:
                            piece.value.copy_(piece.device_value, non_blocking=True)
                        piece.grad.copy_(piece.device_grad, non_blocking=True)
                    event = cuda.Event()
                    event.record(down)
                    arrived.append(event)
            for batch, event in zip(batches, arrived):
                event.synchronize()
                update(batch)
                with cuda.stream(up):
                    for piece in batch:
                        piece.device_value.copy_(piece.value, non_blocking=True)
            # later work on the caller's stream (the forward pass, the next step's
            # downloads into these host buffers) comes after the uploads
            caller.wait_stream(up)

    def _side_streams(self, device, cuda):
        if device not in self._streams:
            self._streams[device] = (cuda.Stream(device), cuda.Stream(device))
        return self._streams[device]


def keep_state_on_host(optimizer) -> None:
    """``load_state_dict`` moves state to each parameter's device; move it back."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                state[key] = value.to(HOST)


class OffloadAdam(torch.optim.Optimizer):
    """``torch.optim.Adam``'s math (the fused CPU kernel) with the state on the host.

    Same arguments and state names as ``torch.optim.Adam`` (``exp_avg``, ``exp_avg_sq``,
    ``max_exp_avg_sq``, ``step``); every state tensor lives in host memory whatever the
    parameters' device, and survives ``state_dict``/``load_state_dict`` there. Parameters
    on a GPU go through a :class:`HostPipeline` (transfers overlapped with the host's
    update, large tensors cut into pieces: Adam is elementwise).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize}
        super().__init__(params, defaults)
        self.pipeline = HostPipeline(split=True)
        self.register_load_state_dict_post_hook(keep_state_on_host)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params, group_of = [], []
        for g, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("OffloadAdam does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = host_zeros_like(p)
                    state["exp_avg_sq"] = host_zeros_like(p)
                    if group["amsgrad"]:
                        state["max_exp_avg_sq"] = host_zeros_like(p)
                for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                    if key in state and not state[key].is_contiguous():
                        state[key] = state[key].contiguous()    # (loaded) cut as flat views
                params.append(p)
                group_of.append(g)
        cut: set[int] = set()          # parameters updated in pieces: their step counted here

        def update(batch: list[Piece]) -> None:
            for g in sorted({group_of[piece.index] for piece in batch}):
                self._adam(self.param_groups[g],
                           [piece for piece in batch if group_of[piece.index] == g], cut)

        self.pipeline.run(params, update)
        for i in cut:
            self.state[params[i]]["step"] += 1
        return loss

    def _adam(self, group, pieces: list[Piece], cut: set[int]) -> None:
        values, grads, exp_avgs, exp_avg_sqs, maxes, steps = ([] for _ in range(6))
        for piece in pieces:
            state = self.state[piece.param]
            values.append(piece.value)
            grads.append(piece.grad)
            exp_avgs.append(piece.flat(state["exp_avg"]))
            exp_avg_sqs.append(piece.flat(state["exp_avg_sq"]))
            if group["amsgrad"]:
                maxes.append(piece.flat(state["max_exp_avg_sq"]))
            if piece.whole:
                steps.append(state["step"])         # the call adds one
            else:
                # each piece's call adds one to a copy; the state's count goes up once
                steps.append(state["step"].clone())
                cut.add(piece.index)
        beta1, beta2 = group["betas"]
        torch_adam.adam(values, grads, exp_avgs, exp_avg_sqs, maxes, steps, fused=True,
                        amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                        weight_decay=group["weight_decay"], eps=group["eps"],
                        maximize=group["maximize"])
