"""The host-update loop for torch: parameters' values and gradients brought from their
device to host buffers in batches, each batch updated by the host, its new values sent
back, the transfers overlapped with the host's work (:class:`HostPipeline`).

:class:`.offload.OffloadAdam` (Adam's fused CPU kernel over host state) and the own
path's offload engine (:class:`.engines.Offload`: any spec's update on the host) run
their updates through it. The host buffers are a :mod:`.staging`'s. A parameter that
already lives on the CPU is updated in place: no copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .moves import TableMoves, plain_layout
from .staging import HostStaging, StagingRing

#: element boundary at which :class:`HostPipeline` may cut a parameter. A multiple of any
#: vector width, so that torch's fused CPU kernels (which run whole vectors from the start
#: of a tensor and a scalar tail at its end) compute every element of a piece exactly as
#: they do in the whole tensor.
PIECE_ALIGNMENT = 1 << 16

#: how many plans (parameter sets) :class:`HostPipeline` keeps: a few, for steps where
#: some parameters have no gradient
KEPT_PLANS = 8


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
    device_value: torch.Tensor | None = None    # None: on the CPU, or between steps
    device_grad: torch.Tensor | None = None
    # ``value`` and ``grad`` as the device addresses them (a ring with transfer="kernel")
    mapped_value: torch.Tensor | None = None
    mapped_grad: torch.Tensor | None = None

    def flat(self, host_tensor: torch.Tensor) -> torch.Tensor:
        """This piece of a host tensor shaped like the parameter (its state, say)."""
        return host_tensor if self.whole else host_tensor.view(-1)[self.start:self.stop]


class Batch(list):
    """A batch's pieces (a list) and its ``memo``: a dict kept with the batch's plan
    between steps (a new one when the plan is made again), where an update keeps what it
    derives from the pieces' host buffers, which stay the same while the plan is kept."""

    __slots__ = ("memo",)

    def __init__(self, pieces, memo: dict) -> None:
        super().__init__(pieces)
        self.memo = memo


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


def paired_launches(ahead: int, batches: int) -> list[tuple]:
    """The ``(up, down)`` batch numbers of each launch of :meth:`HostPipeline._run_paired`
    (None: none that way): the first ``ahead`` batches down on their own, then each batch
    up (once updated) with the batch ``ahead`` after it down."""
    return ([(None, number) for number in range(ahead)] +
            [(number, number + ahead if number + ahead < batches else None)
             for number in range(batches)])


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
    the host does not. Parameters on the CPU are one batch of whole pieces, no copies,
    where they and their gradients are contiguous (a fused CPU kernel pairs elements by
    memory order, and host state is contiguous); others go through the host buffers with
    plain copies.

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

    @torch.no_grad()
    def run(self, params, update: Callable[[list[Piece]], None]) -> None:
        params = list(params)
        by_device: dict[torch.device, list[int]] = {}
        for i, p in enumerate(params):
            by_device.setdefault(p.device, []).append(i)
        for device, indices in by_device.items():
            if device.type == "cpu" and not self.stage_cpu:
                # in place where the parameter and its gradient are laid out as host state
                # is (contiguous); the others through host buffers, with plain copies: a
                # fused CPU kernel pairs elements by memory order, not by index
                plain = [i for i in indices
                         if params[i].is_contiguous() and params[i].grad.is_contiguous()]
                if plain:
                    update([Piece(i, params[i], 0, params[i].numel(), True,
                                  params[i].detach(), params[i].grad) for i in plain])
                indices = sorted(set(indices) - set(plain))
            if indices:
                self._run_staged(device, [(i, params[i]) for i in indices], update)

    def batches(self, indexed) -> list[Batch]:
        """The batches of pieces for ``(index, parameter)`` pairs on one device.

        The plan, its host views and its pieces are kept for the same parameters (index,
        identity, device, shape, dtype, cut or not) while the staging made no new buffer
        since: a step then only gives the kept pieces views of the parameters and their
        gradients (fresh tensors each step), in place. So a batch is the same object at
        every step of a plan, and its pieces hold the device views until
        :meth:`release` (a step's run releases them: they would keep the gradients).
        With ``transfer="table"`` only the pieces the table does not move get views.
        """
        return self._kept(indexed)[1]

    def _kept(self, indexed) -> tuple:
        """The kept plan of :meth:`batches` (:meth:`_plan`'s tuple), views refreshed."""
        device = indexed[0][1].device       # (every parameter's: run groups them)
        split, table = self.split, self._table_transfer(device)

        # the device too: a parameter moved keeps its identity, and the ring's slots are
        # per device; per parameter, cut or not, and with a table whether it moves it
        params = tuple([(i, id(p), p.shape, p.dtype,
                         split and p.is_contiguous() and p.grad.is_contiguous(),
                         table and plain_layout(p)) for i, p in indexed])
        key = (device, params)
        kept = self._plans.get(key)
        if kept is None or kept[0] != self.staging.generation:
            self._plans.pop(key, None)
            kept = self._plan(indexed, [k[4] for k in params], [k[5] for k in params])
            self._plans[key] = kept
            while len(self._plans) > KEPT_PLANS:
                del self._plans[next(iter(self._plans))]
        else:
            self._plans[key] = self._plans.pop(key)     # the least recently used go first
        _, batches, by_parameter, moves = kept
        # a whole piece's device tensor is the parameter itself (the steps run under
        # no_grad: run); a cut one's pieces come from one split of it, detached first
        # so that the views hold no reference to the parameter's own tensor (which
        # torch.utils.swap_tensors, as module.to may call, requires)
        with torch.no_grad():
            for k, (pieces, sizes) in enumerate(by_parameter):
                if moves is not None and moves.moved[k]:
                    continue            # the table reaches it by its address
                p = pieces[0].param
                if sizes is None:       # a whole piece
                    pieces[0].device_value, pieces[0].device_grad = p, p.grad
                    continue
                values = p.detach().view(-1).split_with_sizes(sizes)
                grads = p.grad.view(-1).split_with_sizes(sizes)
                for piece, value, grad in zip(pieces, values, grads):
                    piece.device_value, piece.device_grad = value, grad
        return kept

    @staticmethod
    def release(batches) -> None:
        """Drop the pieces' device views (the parameters' and gradients' memory stays
        with them otherwise, a zeroed gradient included, until the next step)."""
        for batch in batches:
            for piece in batch:
                piece.device_value = piece.device_grad = None

    def forget_memos(self) -> None:
        """Empty every kept batch's memo (what an update derived from state it no longer
        uses: the references would keep that state alive)."""
        for _, batches, _, _ in self._plans.values():
            for batch in batches:
                batch.memo.clear()

    def _plan(self, indexed, split: list[bool], moved: list[bool]) -> tuple:
        """``(staging generation, the batches (their pieces with the host views and, for
        a kernel or table transfer, the same views as the device maps them), each
        parameter's ``(pieces in order, their sizes or None for a whole one)``, the
        :class:`.moves.TableMoves` of a table transfer
        (``moved``: the parameters it moves) or None)``; the pieces' device views are
        filled in by :meth:`batches`."""
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
        device = indexed[0][1].device
        if self._kernel_transfer(device):
            mapped = [self.staging.device_views(number, batch)
                      for number, batch in enumerate(parts)]
        else:
            mapped = [[()] * len(batch) for batch in parts]
        by_parameter: dict[int, list[Piece]] = {}
        batches = []
        for batch, views, mapped_views in zip(plan, host, mapped):
            pieces = []
            for (k, start, stop, whole), (value, grad), aliases in zip(batch, views,
                                                                        mapped_views):
                piece = Piece(indexed[k][0], indexed[k][1], start, stop, whole, value, grad,
                              None, None, *aliases)
                by_parameter.setdefault(k, []).append(piece)
                pieces.append(piece)
            batches.append(Batch(pieces, {}))
        moves = None
        if self._table_transfer(device):
            moves = TableMoves(batches, [p for _, p in indexed], moved,
                               paired_launches(self.staging.lookahead(len(batches)),
                                               len(batches)))
        # each parameter's pieces with their sizes, None for a whole one; its pieces are
        # its elements in order, so one split of the flat parameter gives their views
        by_parameter = [(pieces, None if pieces[0].whole else
                         [piece.stop - piece.start for piece in pieces])
                        for pieces in by_parameter.values()]
        return self.staging.generation, batches, by_parameter, moves

    def _kernel_transfer(self, device) -> bool:
        """Whether the device's threads move the batches (a kernel or a table)."""
        return self.staging.transfer in ("kernel", "table") and device.type == "cuda"

    def _table_transfer(self, device) -> bool:
        return self.staging.transfer == "table" and device.type == "cuda"

    def _run_staged(self, device, indexed, update) -> None:
        _, batches, _, moves = self._kept(indexed)
        try:
            if device.type == "cuda":
                if self._kernel_transfer(device):
                    self._run_paired(device, batches, update, torch.cuda, moves)
                else:
                    self._run_streamed(device, batches, update, torch.cuda)
                return
            for batch in batches:           # stage_cpu: the same loop, plain copies
                for piece in batch:
                    piece.value.copy_(piece.device_value)
                    piece.grad.copy_(piece.device_grad)
                update(batch)
                for piece in batch:
                    piece.device_value.copy_(piece.value)
        finally:
            self.release(batches)

    @staticmethod
    def _wait(event) -> None:
        """Block the host until ``event`` (a batch down) has happened."""
        event.synchronize()

    def _download(self, batch, down, cuda):
        """Queue ``batch``'s copies down on ``down``; the event the host waits for."""
        with cuda.stream(down):
            for target, source in self._downloads(batch):
                target.copy_(source, non_blocking=True)
            arrived = cuda.Event()
            arrived.record(down)
        return arrived

    def _downloads(self, batch) -> list[tuple]:
        """``(host view, device source)`` of each copy bringing ``batch`` down, values
        first (unless not fetched), then gradients."""
        pairs = [(p.value, p.device_value) for p in batch if self.fetch_values]
        return pairs + [(p.grad, p.device_grad) for p in batch]

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

    def _run_paired(self, device, batches, update, cuda, moves=None) -> None:
        """The overlapped loop of ``transfer="kernel"``: one stream, one kernel per batch
        that both sends the batch just updated up and brings a later batch down (PCIe
        carries the two directions at once), and one event per batch down. So the host
        queues one launch and one event record a batch, not two of each plus the streams'
        waits on each other; and the stream's order alone keeps a slot's next download
        after its upload. A ring of ``slots`` then has ``slots - 1`` batches in flight
        (:meth:`.staging.StagingRing.lookahead`): the slot going up is not the one coming
        down in the same kernel. With ``transfer="table"`` the kernel is ``moves``'s
        (:class:`.moves.TableMoves`: the launches of :func:`paired_launches`), after one
        copy of the step's addresses."""
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
                    addresses = None if moves is None else moves.addresses()
                    for up, down in paired_launches(ahead, len(batches)):
                        if up is not None:
                            self._wait(arrived[up % len(arrived)])
                            update(batches[up])
                        ups = [] if up is None else batches[up]
                        downs = [] if down is None else batches[down]
                        if moves is not None:   # the table's kernel; what it cannot move
                            ups, downs = moves.launch(addresses, up, down)
                        self._transfer(ups, downs)
                        if down is not None:
                            arrived[down % len(arrived)].record(side)
            finally:
                caller.wait_stream(side)     # as in _run_streamed

    def _transfer(self, ups: list[Piece], downs: list[Piece]) -> None:
        """One kernel on the current stream sending the pieces ``ups`` up (their slots'
        device mappings to their parameters) and bringing ``downs`` down (values first,
        unless not fetched, then gradients, as :meth:`_downloads` orders them)."""
        targets = [p.device_value for p in ups]
        sources = [p.mapped_value for p in ups]
        if self.fetch_values:
            targets += [p.mapped_value for p in downs]
            sources += [p.device_value for p in downs]
        targets += [p.mapped_grad for p in downs]
        sources += [p.device_grad for p in downs]
        if targets:
            torch._foreach_copy_(targets, sources)

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
