"""Host offload for torch: optimizer state in host memory, the update computed there,
only the new parameter values written back to the parameter's device.

:class:`OffloadAdam` runs torch's fused CPU Adam kernel (``torch._fused_adam_``, as
``torch.optim.adam.adam(..., fused=True)`` calls it) over host state. Its transfers are
a :class:`HostPipeline`, shared with ``SpecOptimizer(offload=True)`` (any spec's own
update on the host): the parameters cut into batches, each batch's gradient and value
brought down while the host updates the batches before it, and each updated batch sent
back up, through pinned host buffers (``.staging``: a ring of a few batch-sized slots by
default) and side CUDA streams.

A parameter that already lives on the CPU is updated in place: no copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.optim import adam as torch_adam

from .staging import (
    HOST,
    HostStaging,
    StagingRing,
    check_one_of,
    host_zeros_like,
    mapped_on_device,
    pinned_zeros_like,
)

#: element boundary at which :class:`HostPipeline` may cut a parameter. A multiple of any
#: vector width, so that torch's fused CPU kernels (which run whole vectors from the start
#: of a tensor and a scalar tail at its end) compute every element of a piece exactly as
#: they do in the whole tensor.
PIECE_ALIGNMENT = 1 << 16

#: where :class:`OffloadAdam` may run a GPU parameter's update (its ``update_on``)
UPDATES_ON = ("host", "device")

#: how many plans (parameter sets) :class:`HostPipeline` keeps: a few, for steps where
#: some parameters have no gradient
KEPT_PLANS = 8

#: how many cut pieces' state views :class:`OffloadAdam` keeps between steps
KEPT_VIEWS = 1 << 14


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
    # ``value`` and ``grad`` as the device addresses them (a ring with transfer="kernel")
    mapped_value: torch.Tensor | None = None
    mapped_grad: torch.Tensor | None = None

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
    parameters. On a CUDA device batches' values and gradients go down in order, each
    batch with an event the host waits for before updating it, and each updated batch
    goes up as soon as it is done: later batches come down while the host updates one.
    How far the downloads run ahead is the staging's (``lookahead``): a
    :class:`.staging.StagingRing` (the default) has a slot per batch in flight, so the
    download into a slot comes after the upload out of it; :class:`.staging.HostStaging`
    (a buffer per parameter) queues them all at once. On the copy engines the downloads
    and the uploads run on two side streams, a copy per piece; with
    ``StagingRing(transfer="kernel")`` one kernel per batch on one side stream sends the
    batch just updated up and brings a later one down (:meth:`_run_paired`). The stream
    that called ``run`` waits for the uploads (later work on it sees the new values) and
    the host does not. Parameters on the CPU are one batch of whole pieces, no copies.

    ``split=True`` lets a large parameter be cut into flat pieces (elementwise updates
    only, such as Adam; a norm or a factored moment needs the whole tensor). The value
    comes down with the gradient so that a parameter changed on the device between steps
    (a loaded checkpoint, an edited weight) is what the host updates.

    ``stage_cpu=True`` stages CPU parameters through the host buffers too, with plain
    copies: the batching runs where no GPU is, for tests.

    ``fetch_values`` (True) brings each value down with its gradient. False is for
    measuring what that transfer costs (``benchmarks/gpu_step_time.py``): the host then
    updates the values it holds, so it needs a :class:`.staging.HostStaging`, and a
    change made to a parameter on its device is lost. Nothing in the library builds a
    pipeline with False: torch cannot see every such change (a write through ``p.data``
    moves no version counter).
    """

    def __init__(self, *, split: bool = False, batch_elements: int = 1 << 23,
                 first_batch_elements: int = 1 << 20, stage_cpu: bool = False,
                 staging: StagingRing | HostStaging | None = None,
                 fetch_values: bool = True) -> None:
        staging = StagingRing() if staging is None else staging
        if not isinstance(staging, (StagingRing, HostStaging)):
            raise TypeError(f"staging must be a StagingRing or a HostStaging, got "
                            f"{type(staging).__name__}")
        if not fetch_values and not isinstance(staging, HostStaging):
            raise ValueError("fetch_values=False needs staging=HostStaging(): a "
                             f"{type(staging).__name__} keeps no values between steps")
        self.split = split
        self.fetch_values = fetch_values
        self.batch_elements = batch_elements
        self.first_batch_elements = first_batch_elements
        self.stage_cpu = stage_cpu
        self.staging = staging
        self._streams: dict[torch.device, tuple] = {}
        self._events: dict[torch.device, list] = {}     # transfer="kernel": per slot
        self._plans: dict[tuple, tuple] = {}     # KEPT_PLANS, least recently used first

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
        """The batches of pieces for ``(index, parameter)`` pairs on one device.

        The plan and its host views are kept for the same parameters (identity, device,
        shape, dtype, cut or not) while the staging made no new buffer since: a step then only
        takes views of the parameters and their gradients (fresh tensors each step).
        """
        def splittable(p) -> bool:
            return self.split and p.is_contiguous() and p.grad.is_contiguous()

        # the device too: a parameter moved keeps its identity, and the ring's slots are
        # per device
        key = tuple((id(p), p.device, p.shape, p.dtype, splittable(p)) for _, p in indexed)
        kept = self._plans.get(key)
        if kept is None or kept[0] != self.staging.generation:
            self._plans.pop(key, None)
            kept = self._plan(indexed, [split for *_, split in key])
            self._plans[key] = kept
            while len(self._plans) > KEPT_PLANS:
                del self._plans[next(iter(self._plans))]
        else:
            self._plans[key] = self._plans.pop(key)     # the least recently used go first
        _, plan, host, mapped = kept
        flat: dict[int, tuple] = {}     # each cut parameter's flat value and gradient

        def device_views(k, start, stop, whole):
            p = indexed[k][1]
            if whole:
                return p.detach(), p.grad
            if k not in flat:
                flat[k] = (p.detach().view(-1), p.grad.view(-1))
            value, grad = flat[k]
            return value[start:stop], grad[start:stop]

        return [[Piece(indexed[k][0], indexed[k][1], start, stop, whole, value, grad,
                       *device_views(k, start, stop, whole), *aliases)
                 for (k, start, stop, whole), (value, grad), aliases
                 in zip(batch, views, mapped_views)]
                for batch, views, mapped_views in zip(plan, host, mapped)]

    def _plan(self, indexed, split: list[bool]) -> tuple:
        """``(staging generation, batches of (k, start, stop, whole), their host views,
        the same views as the device maps them (or ``()`` each))``."""
        plan = plan_pieces([p.numel() for _, p in indexed], split, self.batch_elements,
                           self.first_batch_elements)
        plan = [[(k, start, stop, start == 0 and stop == indexed[k][1].numel())
                 for k, start, stop in batch] for batch in plan]
        parts = [[(indexed[k][1], start, stop, whole) for k, start, stop, whole in batch]
                 for batch in plan]
        if not self.staging.fits(parts):
            # the kept plans' views hold the slots about to be replaced: let them go
            # first, so that the old slots are freed before the new ones are pinned
            self._plans.clear()
        self.staging.reserve(parts)
        host = [self.staging.views(number, batch) for number, batch in enumerate(parts)]
        if self._kernel_transfer(indexed[0][1].device):
            mapped = [self.staging.device_views(number, batch)
                      for number, batch in enumerate(parts)]
        else:
            mapped = [[()] * len(batch) for batch in parts]
        return self.staging.generation, plan, host, mapped

    def _kernel_transfer(self, device) -> bool:
        return self.staging.transfer == "kernel" and device.type == "cuda"

    def _run_staged(self, device, indexed, update) -> None:
        batches = self.batches(indexed)
        if device.type == "cuda":
            run = self._run_paired if self._kernel_transfer(device) else self._run_streamed
            run(device, batches, update, torch.cuda)
            return
        for batch in batches:           # stage_cpu: the same loop, plain copies
            for piece in batch:
                piece.value.copy_(piece.device_value)
                piece.grad.copy_(piece.device_grad)
            update(batch)
            for piece in batch:
                piece.device_value.copy_(piece.value)

    @staticmethod
    def _wait(event) -> None:
        """Block the host until ``event`` (a batch down) has happened."""
        event.synchronize()

    def _download(self, batch, down, cuda):
        """Queue ``batch``'s copies down on ``down``; the event the host waits for."""
        with cuda.stream(down):
            for target, source in self._downloads(batch, mapped=False):
                target.copy_(source, non_blocking=True)
            arrived = cuda.Event()
            arrived.record(down)
        return arrived

    def _downloads(self, batch, mapped: bool) -> list[tuple]:
        """``(target, device source)`` of each copy bringing ``batch`` down, values first
        (unless not fetched), then gradients; each target the piece's host view, or its
        device mapping where ``mapped``."""
        pairs = [(p.mapped_value if mapped else p.value, p.device_value) for p in batch
                 if self.fetch_values]
        return pairs + [(p.mapped_grad if mapped else p.grad, p.device_grad) for p in batch]

    def _run_streamed(self, device, batches, update, cuda) -> None:
        """The overlapped loop on the copy engines: downloads and uploads on two streams,
        a copy per piece; ``cuda`` is ``torch.cuda`` (a stand-in in a CPU test)."""
        ahead = self.staging.lookahead(len(batches))
        with cuda.device(device):
            down, up = self._side_streams(device, cuda)
            caller = cuda.current_stream(device)
            # the gradients, and any change to the values, are work queued on the caller's
            # stream; the uploads overwrite values that work may still read
            down.wait_stream(caller)
            # the previous step's uploads read the buffers these downloads fill, whatever
            # stream that step was called from
            down.wait_stream(up)
            up.wait_stream(caller)
            try:
                arrived = [self._download(batch, down, cuda) for batch in batches[:ahead]]
                for number, batch in enumerate(batches):
                    self._wait(arrived[number])
                    update(batch)
                    self._upload(batch, up, cuda)
                    if number + ahead < len(batches):
                        # the next batch for this slot comes down once this one is up
                        sent = cuda.Event()
                        sent.record(up)
                        down.wait_event(sent)
                        arrived.append(self._download(batches[number + ahead], down, cuda))
            finally:
                # later work on the caller's stream (the forward pass) comes after the
                # uploads, also those queued before an update raised
                caller.wait_stream(up)

    @staticmethod
    def _upload(batch, up, cuda) -> None:
        """Queue ``batch``'s new values up on ``up``."""
        with cuda.stream(up):
            for piece in batch:
                piece.device_value.copy_(piece.value, non_blocking=True)

    def _run_paired(self, device, batches, update, cuda) -> None:
        """The overlapped loop of ``transfer="kernel"``: one stream, one kernel per batch
        that both sends the batch just updated up and brings a later batch down (PCIe
        carries the two directions at once), and one event per batch down. So the host
        queues one launch and one event record a batch, not two of each plus the streams'
        waits on each other; and the stream's order alone keeps a slot's next download
        after its upload. A ring of ``slots`` then has ``slots - 1`` batches in flight
        (:meth:`.staging.StagingRing.lookahead`): the slot going up is not the one coming
        down in the same kernel."""
        ahead = self.staging.lookahead(len(batches))
        with cuda.device(device):
            _, side = self._side_streams(device, cuda)
            arrived = self._arrival_events(device, cuda)
            caller = cuda.current_stream(device)
            # the gradients and any change to the values are the caller's work (and the
            # uploads overwrite values it may still read); the previous step's uploads
            # are on this stream already
            side.wait_stream(caller)
            try:
                with cuda.stream(side):
                    for number in range(ahead):     # the first batches, each on its own
                        self._transfer([], self._downloads(batches[number], mapped=True))
                        arrived[number % len(arrived)].record(side)
                    for number, batch in enumerate(batches):
                        self._wait(arrived[number % len(arrived)])
                        update(batch)
                        later = number + ahead
                        self._transfer([(p.device_value, p.mapped_value) for p in batch],
                                       self._downloads(batches[later], mapped=True)
                                       if later < len(batches) else [])
                        if later < len(batches):
                            arrived[later % len(arrived)].record(side)
            finally:
                caller.wait_stream(side)     # as in _run_streamed

    @staticmethod
    def _transfer(ups: list[tuple], downs: list[tuple]) -> None:
        """One kernel on the current stream for every ``(target, source)`` pair, up and
        down (each target a device tensor or a slot's device mapping)."""
        pairs = ups + downs
        torch._foreach_copy_([t for t, _ in pairs], [s for _, s in pairs])

    def _arrival_events(self, device, cuda) -> list:
        """Reusable events, one per ring slot: batch ``b``'s arrival is event
        ``b % slots``, recorded again only once the host has waited for it (fewer than
        ``slots`` batches are in flight)."""
        events = self._events.get(device)
        if events is None or len(events) < self.staging.slots:    # (a new staging)
            events = self._events[device] = [cuda.Event()
                                             for _ in range(self.staging.slots)]
        return events

    def _side_streams(self, device, cuda):
        if device not in self._streams:
            self._streams[device] = (cuda.Stream(device), cuda.Stream(device))
        return self._streams[device]


def _check_device_update(params) -> bool:
    """Whether ``update_on="device"`` has GPU parameters to update; refuses what torch's
    fused CUDA Adam cannot take over pinned, contiguous state (before any state is made):
    another device than one CUDA device besides the CPU, a parameter not contiguous, a
    gradient of another dtype or layout."""
    devices = sorted({str(p.device) for p in params if p.device.type != "cpu"})
    if len(devices) > 1 or any(not d.startswith("cuda") for d in devices):
        raise ValueError("OffloadAdam(update_on='device') updates the parameters of one "
                         f"CUDA device (and the CPU's), got {', '.join(devices)}")
    for i, p in enumerate(params):
        if p.device.type != "cuda":
            continue
        if not p.is_contiguous():
            raise ValueError(f"OffloadAdam(update_on='device') needs contiguous parameters "
                             f"(the state in host memory is), got parameter {i} with "
                             f"strides {p.stride()}")
        if p.grad.dtype != p.dtype or p.grad.stride() != p.stride():
            raise ValueError(f"OffloadAdam(update_on='device'): parameter {i}'s gradient "
                             f"must have its dtype and strides ({p.dtype}, {p.stride()}), "
                             f"got {p.grad.dtype}, {p.grad.stride()}")
    return bool(devices)


def keep_state_on_host(optimizer) -> None:
    """``load_state_dict`` moves state to each parameter's device; move it back."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                state[key] = value.to(HOST)


def offload_adam_pipeline() -> HostPipeline:
    """:class:`OffloadAdam`'s pipeline: pieces cut to batches of 2**21 elements (the
    first 2**19), moved by one kernel a batch through a ring of 4 slots (16 MiB each for
    float32; :meth:`HostPipeline._run_paired`).

    Why: in the two latest H100 probes (``benchmarks/offload_probe.py``, GPT-2 small, 16
    host threads) kernel transfers with these batches took 1.25 and 1.28x the host's
    fused Adam alone, where the copy engines with batches of 2**23 (the default before)
    took 1.36 and 1.50x in the same runs: batches this small stay in the host's cache
    between their download, the update and their upload (the host's update inside the
    pipeline took 26 to 27 ms, against 30 ms alone), and a kernel a batch keeps the
    host's cost of queueing 62 batches low. The loop of one kernel a batch both ways is
    newer than those runs.
    """
    return HostPipeline(split=True, batch_elements=1 << 21, first_batch_elements=1 << 19,
                        staging=StagingRing(transfer="kernel"))


class OffloadAdam(torch.optim.Optimizer):
    """``torch.optim.Adam``'s math (the fused CPU kernel) with the state on the host.

    Same arguments and state names as ``torch.optim.Adam`` (``exp_avg``, ``exp_avg_sq``,
    ``max_exp_avg_sq``, ``step``); every state tensor lives in host memory whatever the
    parameters' device, and survives ``state_dict``/``load_state_dict`` there. Parameters
    on a GPU go through a :class:`HostPipeline` (transfers overlapped with the host's
    update, large tensors cut into pieces: Adam is elementwise), ``self.pipeline``:
    :func:`offload_adam_pipeline` unless another is assigned (to choose the batch size
    or the staging, e.g. ``HostPipeline(split=True, staging=StagingRing(slots=8))``).

    ``update_on`` (one of :data:`UPDATES_ON`; through ``uo.build``:
    ``options={"update_on": "device"}``) says where a GPU parameter's update runs:

    * ``"host"`` (the default): the host's fused Adam, as above (MindSpore's
      ``AdamOffload`` computes there too). On H100s with 16 host threads, GPT-2 small,
      the earlier default pipeline (copy engines, batches of 2**23 elements) took 1.34
      to 1.53x the host's fused Adam alone, and kernel transfers with batches of 2**21
      1.25 and 1.28x (``docs/devices.md``; the target is 1.15x).
    * ``"device"``: torch's fused CUDA Adam, reading and writing the state where it lives,
      in pinned host memory, through the device's mapping of those pages (each step moves
      the moments over the bus, 16 bytes per float32 element, and nothing else). Still 0
      bytes of state on the GPU, no host update and no copies; but 8 bytes (12 with
      ``amsgrad``) pinned on the host per element, locked out of the rest of the system,
      and the GPU busy for the step. ``step`` returns once the update is done (the host
      may then read the state). The numbers are torch's fused CUDA Adam's, not the host
      kernel's (they differ in the last bits). Parameters of one CUDA device per
      optimizer; CPU parameters are updated on the host either way. On the same H100s:
      0.93 to 1.05x the host's fused Adam alone.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False, update_on="host"):
        check_one_of("update_on", update_on, UPDATES_ON)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize}
        super().__init__(params, defaults)
        self._update_on = update_on
        self.pipeline = offload_adam_pipeline()
        self._mapped: dict[torch.Tensor, tuple] = {}    # update_on="device": state aliases
        # each cut piece's flat views of its state, kept between steps:
        # (id(parameter), state name, start, stop) -> (state tensor, view); a new state
        # tensor (a reset state, one written by hand) takes its old entry's place
        self._pieces: dict[tuple, tuple] = {}
        self.register_load_state_dict_post_hook(keep_state_on_host)
        # the aliases and views of state just replaced would keep it (and its pinned pages)
        self.register_load_state_dict_post_hook(lambda optimizer: optimizer._forget_views())

    @property
    def update_on(self) -> str:
        """Where a GPU parameter's update runs (:data:`UPDATES_ON`); may be changed
        between steps."""
        return self._update_on

    @update_on.setter
    def update_on(self, value) -> None:
        check_one_of("update_on", value, UPDATES_ON)
        self._update_on = value
        self._mapped.clear()

    def _forget_views(self) -> None:
        self._mapped.clear()
        self._pieces.clear()

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
                params.append(p)
                group_of.append(g)
        on_device = self.update_on == "device" and _check_device_update(params)
        for p, g in zip(params, group_of):
            state = self.state[p]
            mapped = on_device and p.device.type == "cuda"
            if not state:
                # the device reads and writes mapped state: it must be pinned
                zeros = pinned_zeros_like if mapped else host_zeros_like
                state["step"] = zeros(torch.empty((), dtype=torch.float32))
                state["exp_avg"] = zeros(p)
                state["exp_avg_sq"] = zeros(p)
                if self.param_groups[g]["amsgrad"]:
                    state["max_exp_avg_sq"] = zeros(p)
            for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"):
                if key in state and not state[key].is_contiguous():
                    state[key] = state[key].contiguous()    # (loaded) cut as flat views
                if mapped and key in state and not state[key].is_pinned():
                    state[key] = state[key].pin_memory()    # (loaded) pageable
            if mapped and state["step"].dtype != torch.float32:
                # (loaded from another default dtype) the CUDA kernel reads a float32
                state["step"] = state["step"].to(torch.float32).pin_memory()
        if on_device:
            self._update_on_device(params, group_of)
            return loss
        cut: dict[int, torch.Tensor] = {}   # updated in pieces: their step counted here

        def update(batch: list[Piece]) -> None:
            groups = {group_of[piece.index] for piece in batch}
            if len(groups) == 1:        # (most batches: no pieces to sort out)
                self._adam(self.param_groups[groups.pop()], batch, cut)
                return
            for g in sorted(groups):
                self._adam(self.param_groups[g],
                           [piece for piece in batch if group_of[piece.index] == g], cut)

        self.pipeline.run(params, update)
        for i in cut:
            self.state[params[i]]["step"] += 1
        return loss

    def _update_on_device(self, params, group_of) -> None:
        """Fused Adam per group: GPU parameters against their state's device mapping,
        CPU parameters against their host state; then wait for the GPU's update."""
        device = next(p.device for p in params if p.device.type == "cuda")
        try:
            for g, group in enumerate(self.param_groups):
                pieces = [Piece(i, p, 0, p.numel(), True, p.detach(), p.grad)
                          for i, (p, h) in enumerate(zip(params, group_of)) if h == g]
                if pieces:
                    self._adam(group, pieces, {})
        finally:    # also after a group's launch failed: the host may read the state
            torch.cuda.current_stream(device).synchronize()

    def _state_of(self, p) -> dict:
        """``p``'s state as the update reads it: the host tensors themselves, or for a
        GPU parameter under ``update_on="device"`` their device mappings (made once per
        state tensor)."""
        state = self.state[p]
        if self.update_on != "device" or p.device.type != "cuda":
            return state
        host = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
        key = tuple((k, v.data_ptr()) for k, v in host.items())
        kept = self._mapped.get(p)
        if kept is None or kept[0] != key:
            kept = self._mapped[p] = (key, {k: mapped_on_device(v, p.device)
                                            for k, v in host.items()})
        return kept[1]

    def _piece(self, state: dict, name: str, piece: Piece) -> torch.Tensor:
        """``piece.flat(state[name])``, the view kept between steps (a host step cuts the
        same pieces each time: taking the views anew was a fifth of its Python)."""
        state_tensor = state[name]
        if piece.whole:
            return state_tensor
        key = (id(piece.param), name, piece.start, piece.stop)
        kept = self._pieces.get(key)
        if kept is None or kept[0] is not state_tensor:
            if len(self._pieces) >= KEPT_VIEWS:
                self._pieces.clear()
            kept = self._pieces[key] = (state_tensor, piece.flat(state_tensor))
        return kept[1]

    def _adam(self, group, pieces: list[Piece], cut: dict) -> None:
        """torch's fused Adam over ``pieces`` of one group. ``cut`` maps each parameter
        updated in pieces this step to its step count plus one, made at its first piece:
        every piece's kernel reads that count, and the state's count goes up once, after
        the step (:meth:`step`)."""
        values, grads, exp_avgs, exp_avg_sqs, maxes, steps = ([] for _ in range(6))
        amsgrad = group["amsgrad"]
        beta1, beta2 = group["betas"]
        lr, dtype = group["lr"], pieces[0].value.dtype
        # what torch.optim.adam.adam(..., fused=True) runs for one device and dtype,
        # without its Python (grouping by device and dtype, the checks of the other
        # modes), which cost as much as the kernel on a host batch
        direct = (all(isinstance(x, float) for x in (lr, beta1, beta2))
                  and all(p.value.is_cpu and p.value.dtype == dtype for p in pieces))
        counted = []        # the whole pieces' counts, one on before the kernel reads them
        for piece in pieces:
            state = self._state_of(piece.param)
            values.append(piece.value)
            grads.append(piece.grad)
            exp_avgs.append(self._piece(state, "exp_avg", piece))
            exp_avg_sqs.append(self._piece(state, "exp_avg_sq", piece))
            if amsgrad:
                maxes.append(self._piece(state, "max_exp_avg_sq", piece))
            if piece.whole:
                steps.append(state["step"])
                counted.append(state["step"])
                continue
            ahead = cut.get(piece.index)
            if ahead is None:
                ahead = cut[piece.index] = state["step"] + 1
            # torch.optim.adam.adam adds one itself: to a copy of the count before
            steps.append(ahead if direct else ahead - 1)
        if direct:
            if counted:
                torch._foreach_add_(counted, 1)
            torch._fused_adam_(values, grads, exp_avgs, exp_avg_sqs, maxes, steps,
                               amsgrad=amsgrad, lr=lr, beta1=beta1, beta2=beta2,
                               weight_decay=group["weight_decay"], eps=group["eps"],
                               maximize=group["maximize"])
            return
        torch_adam.adam(values, grads, exp_avgs, exp_avg_sqs, maxes, steps, fused=True,
                        amsgrad=amsgrad, beta1=beta1, beta2=beta2, lr=lr,
                        weight_decay=group["weight_decay"], eps=group["eps"],
                        maximize=group["maximize"])
