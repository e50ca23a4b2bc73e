"""Host offload for torch: optimizer state in host memory, the update computed there,
only the new parameter values written back to the parameter's device.

:class:`OffloadAdam` runs torch's fused CPU Adam kernel (``torch._fused_adam_``, as
``torch.optim.adam.adam(..., fused=True)`` calls it) over host state. Its transfers are
a :class:`.pipeline.HostPipeline`, shared with ``SpecOptimizer(offload=True)`` (any
spec's own update on the host): the parameters cut into batches, each batch's gradient
and value brought down while the host updates the batches before it, and each updated
batch sent back up, through pinned host buffers (``.staging``: a ring of a few
batch-sized slots by default) and side CUDA streams.

A parameter that already lives on the CPU is updated in place: no copy.
"""

from __future__ import annotations

import torch
from torch.optim import adam as torch_adam

from unified_opt import _validation as v

from .loading import check_loaded_state
from .pipeline import Batch, HostPipeline, Piece
from .staging import (
    HOST,
    StagingRing,
    host_zeros_like,
    mapped_on_device,
    pinned_zeros_like,
)

#: where :class:`OffloadAdam` may run a GPU parameter's update (its ``update_on``)
UPDATES_ON = ("host", "device")

#: the state tensors a host Adam step reads, ``max_exp_avg_sq`` in amsgrad groups only
ADAM_STATE = ("exp_avg", "exp_avg_sq", "step")
AMSGRAD_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step")


def _prepare_state(state: dict, pinned: bool) -> None:
    """Make a parameter's state what the kernels take: contiguous (a loaded state may not
    be; a cut piece is a flat view of it), and for ``update_on="device"`` pinned, its
    step float32 (a state loaded from pageable memory or another default dtype)."""
    for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"):
        if key in state and not state[key].is_contiguous():
            state[key] = state[key].contiguous()
        if pinned and key in state and not state[key].is_pinned():
            state[key] = state[key].pin_memory()
    if pinned and state["step"].dtype != torch.float32:
        state["step"] = state["step"].to(torch.float32).pin_memory()


def _fused_arguments(group) -> bool:
    """Whether a group's hyper-parameters go to torch's fused kernel as they are (plain
    floats; a tensor lr or beta takes ``torch.optim.adam.adam``'s handling)."""
    beta1, beta2 = group["betas"]
    return all(isinstance(x, float) for x in (group["lr"], beta1, beta2))


class _BatchCall:
    """One batch's arguments to torch's fused Adam, one list set per (group, dtype), made
    once and kept in the batch's memo while they hold: the same state tensors (not
    replaced by a load or by hand; a cut piece's are flat views of its parameter's),
    groups and amsgrad flags. A step then costs a check
    per piece and one kernel call per list set, not the lists made again (on an H100's
    host, GPT-2 small, making them took 4.2 of a 35.7 ms step)."""

    __slots__ = ("checks", "calls")

    def __init__(self, batch, states: list, group_of: list, groups: list) -> None:
        self.checks = []
        calls: dict[tuple, tuple] = {}
        for piece in batch:
            g, state = group_of[piece.index], states[piece.index]
            _prepare_state(state, pinned=False)
            names = AMSGRAD_STATE if groups[g]["amsgrad"] else ADAM_STATE
            self.checks.append((piece.index, g, state, names, [state[n] for n in names]))
            values, grads, exp_avgs, exp_avg_sqs, maxes, steps = calls.setdefault(
                (g, piece.value.dtype), ([], [], [], [], [], []))
            values.append(piece.value)
            grads.append(piece.grad)
            exp_avgs.append(piece.flat(state["exp_avg"]))
            exp_avg_sqs.append(piece.flat(state["exp_avg_sq"]))
            if groups[g]["amsgrad"]:
                maxes.append(piece.flat(state["max_exp_avg_sq"]))
            steps.append(state["step"])     # a cut parameter's pieces share its count
        self.calls = [(g, lists) for (g, _), lists in calls.items()]

    def holds(self, states: list, group_of: list, groups: list) -> bool:
        for index, g, state, names, tensors in self.checks:
            if (states[index] is not state or group_of[index] != g
                    or bool(groups[g]["amsgrad"]) != (names is AMSGRAD_STATE)):
                return False
            for name, tensor in zip(names, tensors):
                if state.get(name) is not tensor:
                    return False
        return True

    def run(self, groups: list) -> None:
        """The kernel over each list set; the counts it reads are already one on."""
        for g, (values, grads, exp_avgs, exp_avg_sqs, maxes, steps) in self.calls:
            group = groups[g]
            beta1, beta2 = group["betas"]
            if not _fused_arguments(group):
                # torch's function adds one to the counts itself: to copies of the count
                # before (a cut parameter's pieces, in several calls, share one count)
                torch_adam.adam(values, grads, exp_avgs, exp_avg_sqs, maxes,
                                [step - 1 for step in steps], fused=True,
                                amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2,
                                lr=group["lr"], weight_decay=group["weight_decay"],
                                eps=group["eps"], maximize=group["maximize"])
                continue
            torch._fused_adam_(values, grads, exp_avgs, exp_avg_sqs, maxes, steps,
                               amsgrad=group["amsgrad"], lr=group["lr"], beta1=beta1,
                               beta2=beta2, weight_decay=group["weight_decay"],
                               eps=group["eps"], maximize=group["maximize"])


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


def _check_loaded_moments(optimizer, state_dict: dict) -> None:
    """The pre-hook refusing a state_dict whose moments are not each parameter's shape
    (its fused kernel, called directly, would write out of bounds): Adam's ``exp_avg``
    and ``exp_avg_sq``, and ``max_exp_avg_sq`` in an amsgrad group."""
    def moments(group, p) -> dict[str, tuple]:
        names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group.get("amsgrad")
                                             else ())
        return dict.fromkeys(names, tuple(p.shape))

    check_loaded_state("OffloadAdam.load_state_dict", optimizer, state_dict, moments)


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
    host's cost of queueing 62 batches low. With one kernel a batch both ways (this
    pipeline) the probe on an H100 read 1.05x, against 1.17x for batches of 2**20 and
    1.32x for 2**19 in the same run.
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
      to 1.53x the host's fused Adam alone; the default now (one kernel a batch both
      ways, batches of 2**21) 1.03 to 1.24x on four H100 hosts at earlier commits, the
      most where the host's Adam was fastest, and 0.90 to 1.13x in nine measurements
      on three H100 machine starts since (``docs/devices.md``; the target is 1.15x).
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
        v.check_choice("OffloadAdam", "update_on", update_on, UPDATES_ON)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize}
        super().__init__(params, defaults)
        self._update_on = update_on
        self.pipeline = offload_adam_pipeline()
        self._mapped: dict[torch.Tensor, tuple] = {}    # update_on="device": state aliases
        self.register_load_state_dict_pre_hook(_check_loaded_moments)
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
        v.check_choice("OffloadAdam", "update_on", value, UPDATES_ON)
        self._update_on = value
        self._mapped.clear()

    def _forget_views(self) -> None:
        self._mapped.clear()
        self.pipeline.forget_memos()

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
            if on_device:
                _prepare_state(state, pinned=mapped)
            # (the host step checks a state when it makes a batch's arguments)
        if on_device:
            self._update_on_device(params, group_of)
        else:
            self._step_host(params, group_of)
        return loss

    def _step_host(self, params, group_of) -> None:
        """The host update through the pipeline: each batch one fused-kernel call per
        group and dtype over arguments kept between steps (:class:`_BatchCall`). The
        kernel reads each count plus one (as ``torch.optim.adam`` adds one before it);
        every count goes up at the first batch, so a step refused before any update
        counts nothing."""
        states = [self.state[p] for p in params]
        counted = []

        def update(batch: list[Piece]) -> None:
            if not counted:
                torch._foreach_add_([state["step"] for state in states], 1)
                counted.append(True)
            memo = batch.memo if isinstance(batch, Batch) else {}
            call = memo.get("adam")
            if call is None or not call.holds(states, group_of, self.param_groups):
                call = memo["adam"] = _BatchCall(batch, states, group_of, self.param_groups)
            call.run(self.param_groups)

        self.pipeline.run(params, update)

    def _update_on_device(self, params, group_of) -> None:
        """Fused Adam per group: GPU parameters against their state's device mapping,
        CPU parameters against their host state; then wait for the GPU's update."""
        device = next(p.device for p in params if p.device.type == "cuda")
        try:
            for g, group in enumerate(self.param_groups):
                pieces = [Piece(i, p, 0, p.numel(), True, p.detach(), p.grad)
                          for i, (p, h) in enumerate(zip(params, group_of)) if h == g]
                if pieces:
                    self._adam(group, pieces)
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

    def _adam(self, group, pieces: list[Piece]) -> None:
        """torch's fused Adam over whole ``pieces`` of one group, each against
        :meth:`_state_of` (``update_on="device"``)."""
        amsgrad = group["amsgrad"]
        beta1, beta2 = group["betas"]
        lr, dtype = group["lr"], pieces[0].value.dtype
        states = [self._state_of(piece.param) for piece in pieces]
        lists = ([piece.value for piece in pieces], [piece.grad for piece in pieces],
                 [state["exp_avg"] for state in states],
                 [state["exp_avg_sq"] for state in states],
                 [state["max_exp_avg_sq"] for state in states] if amsgrad else [],
                 [state["step"] for state in states])
        # what torch.optim.adam.adam(..., fused=True) runs for one device and dtype,
        # without its Python (grouping by device and dtype, the checks of the other
        # modes), which cost as much as the kernel on a host batch
        if _fused_arguments(group) and all(p.value.is_cpu and p.value.dtype == dtype
                                           for p in pieces):
            torch._foreach_add_(lists[-1], 1)
            torch._fused_adam_(*lists, amsgrad=amsgrad, lr=lr, beta1=beta1, beta2=beta2,
                               weight_decay=group["weight_decay"], eps=group["eps"],
                               maximize=group["maximize"])
            return
        torch_adam.adam(*lists, fused=True, amsgrad=amsgrad, beta1=beta1, beta2=beta2,
                        lr=lr, weight_decay=group["weight_decay"], eps=group["eps"],
                        maximize=group["maximize"])
