"""The own optimizer compiled into a MindSpore graph: GRAPH_MODE, a GRAPH_MODE
``nn.TrainOneStepCell`` or ``ms.Model.train``, an ``@ms.jit`` step that calls
``opt(grads)``.

Two forms (``uo.build(..., options={"graph": ...})``, chosen by :func:`choose`):

* ``"custom"`` (this module): custom operators over the kernel VM, the PyNative
  path's code and numbers bit for bit; the CPU only;
* ``"ops"`` (:mod:`.graph_ops`): the spec's update as MindSpore operations, which
  MindSpore compiles for any device;
* ``"auto"`` (the default): on the CPU the faster of the two for the algorithm as
  measured (:data:`.graph_ops.CPU_STEP_MS`), the other where that one refuses the
  spec; on any other device ``"ops"``, with an
  :class:`unified_opt.devices.UnverifiedDeviceWarning` (verified on the CPU only,
  docs/devices.md).

The custom form holds, per step, one ``ops.Custom(..., func_type="pyfunc")`` operator and one
``ops.Custom(..., func_type="aot")`` operator per parameter:

* the pyfunc operator (*host*) gets the optimizer's ``global_step`` and
  ``learning_rate`` and runs Python: each parameter's spec at this step
  (``plan.spec.at_step(global_step)``, update step ``global_step + 1``: the semantics of
  the PyNative step's :class:`unified_opt.step_loop.StepLoop`, where every parameter
  has a gradient at every step), traced
  (:mod:`unified_opt.kernels`), into one float64 tensor ``[next lr, offsets...,
  segments...]``, a segment ``[code length, scalar count, code..., scalars...]`` holding
  that parameter's VM code and the values of its scalar slots (the lr, bias corrections,
  ... of this step, in double precision). Python decides what the PyNative path
  decides, so the schedule, the step limit and an lr written from outside behave the
  same;
* each AOT operator runs the kernel VM (``uo_vm_aot``) over its parameter, gradient and
  state Parameters in place: the numbers of the PyNative path, bit for bit (the same
  code on the same VM, or the generated kernel registered for it).

Each parameter's segment has a fixed size in the graph: the largest its update needs at
the steps :data:`PROBE_STEPS` (SGD's first step and RAdam's rectification change the
program; the lr and bias corrections only change values). A step whose program would
not fit raises a RuntimeError naming it.

Refused (:func:`refusal`), at the graph's compile, with the reason: a gradient pre-step
(clipping, loss scale, skipping, centralization: they read values in Python), an update
that does not trace, a data-parallel exchange, and a device other than the CPU (the
pyfunc and AOT operators run on the CPU here).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype

from unified_opt.kernels import build
from unified_opt.kernels.runtime import Segmented
from unified_opt.kernels.trace import Untraceable
from unified_opt.pre_step import has_pre_step

from .graph_ops import GRAPH_FORMS, OpsGraph, cpu_choice
from .kernels import on_cpu

#: the steps whose programs size each parameter's segment
PROBE_STEPS = (1, 2, 3, 4, 5, 6, 8, 10, 16, 32, 100, 1000, 10**4, 10**5)


def common_refusal(optimizer) -> str:
    """Why ``optimizer`` cannot run compiled into a graph in either form ("" when it
    may): its exchange between ranks and its gradient pre-step run in Python."""
    owner = f"{type(optimizer).__name__} ({optimizer.spec.name})"
    if optimizer.exchange is not None:
        return (f"{owner}: a data-parallel spec exchanges between the ranks in Python; in "
                "GRAPH_MODE or @ms.jit it cannot run (run it in PyNative)")
    if has_pre_step(optimizer.spec):
        return (f"{owner}: its gradient pre-step (grad_clip, loss_scale, skip_nonfinite, "
                "grad_centralization) runs in Python on PyNative only; in a graph, clip and "
                "scale in the train step (e.g. ops.clip_by_global_norm) and build the spec "
                "without them")
    return ""


def refusal(optimizer) -> str:
    """Why ``optimizer`` cannot run compiled into a graph as custom operators ("" when
    it can)."""
    owner = f"{type(optimizer).__name__} ({optimizer.spec.name})"
    if optimizer._kernels is None:
        why = ("options compile=False" if optimizer.compile_mode is False else
               "a data-parallel spec exchanges between the ranks in Python")
        return (f"{owner} runs eagerly here ({why}); as custom operators over the kernel "
                "VM (graph='custom') it cannot run")
    if not on_cpu():
        return (f"{owner}: as custom operators (graph='custom') it runs custom CPU "
                f"operators, and the device_target is {ms.get_context('device_target')!r}; "
                "graph='ops' runs its update as MindSpore operations on that device")
    return common_refusal(optimizer)


class GraphStep:
    """The graph's operators and layout for one optimizer (see the module). Built on the
    CPU, with the kernel VM available, for specs whose every parameter traces; else
    :attr:`refusal` says why not."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.refusal = refusal(optimizer)
        self.sizes: list[int] = []
        if self.refusal:
            return
        try:
            runner = optimizer._kernels.runner()
            if runner is None:
                raise build.KernelUnavailable("the kernel VM cannot be built here")
            self.order = [runner.state_order(plan.spec, tuple(p.shape), "float32")
                          for p, plan in zip(optimizer._parameters, optimizer._plans)]
            # step after step, every parameter at each: the runner's traces of one step
            # serve every parameter of one spec and rank (a parameter after parameter
            # order traced each shape at every probe step)
            pairs = list(zip(optimizer._parameters, optimizer._plans))
            self.sizes = [0] * len(pairs)
            for step in PROBE_STEPS:
                for i, (p, plan) in enumerate(pairs):
                    self.sizes[i] = max(self.sizes[i], self._segment(runner, p, plan, step))
            library = str(build.library())
        except (Untraceable, build.KernelUnavailable) as error:
            self.refusal = (f"{type(optimizer).__name__} ({optimizer.spec.name}) cannot run "
                            f"compiled into a graph: {error}")
            return
        n = len(self.sizes)
        self.offsets = list(np.cumsum([1 + n] + self.sizes[:-1]))
        self.length = 1 + n + sum(self.sizes)
        self.host = ops.Custom(self.packed, out_shape=(self.length,), out_dtype=mstype.float64,
                               func_type="pyfunc")
        self.kernels = tuple(ops.Custom(f"{library}:uo_vm_aot", out_shape=(1,),
                                        out_dtype=mstype.float32, func_type="aot")
                             for _ in self.sizes)
        self.indices = tuple(Tensor(np.array([i], np.int32)) for i in range(n))

    @staticmethod
    def _segment(runner, p, plan, step) -> int:
        """The segment's size at ``step`` (0 for a step the schedule does not reach: a
        OneCycle past its total_steps raises there, an exponential cycle overflows)."""
        try:
            spec = plan.spec.at_step(step - 1)
            lr = plan.lr(float(spec.lr_at(step - 1)))
        except (ValueError, ArithmeticError):
            return 0
        code, scalars = runner.code_and_scalars(spec, tuple(p.shape), "float32", lr, step)
        if isinstance(code, Segmented):
            raise Untraceable("its update has a matrix phase (Muon's iteration), which the "
                              "host runs between the kernels' phases: not one custom "
                              "operator per parameter")
        return 2 + code.size + scalars.size

    def packed(self, global_step, learning_rate) -> np.ndarray:
        """The host operator's function (see the module)."""
        optimizer = self.optimizer
        if len(optimizer._parameters) != len(self.sizes):
            raise RuntimeError(f"{type(optimizer).__name__}: this graph was compiled over "
                               f"{len(self.sizes)} parameters and the optimizer holds "
                               f"{len(optimizer._parameters)} since add_param_group; make "
                               "the compiled step again (nothing was changed)")
        step0 = int(np.asarray(global_step).reshape(-1)[0])
        lr = optimizer.lr_of_step(step0, float(np.asarray(learning_rate).reshape(-1)[0]))
        runner = optimizer._kernels.runner()
        out = np.zeros(self.length, dtype=np.float64)
        out[0] = optimizer.spec.lr_at(step0 + 1)
        for i, (p, plan) in enumerate(zip(optimizer._parameters, optimizer._plans)):
            spec = plan.spec.at_step(step0)
            code, scalars = runner.code_and_scalars(spec, tuple(p.shape), "float32",
                                                    plan.lr(lr), step0 + 1)
            runner.specialized(code, int(np.prod(p.shape, dtype=np.int64)), spec.name)
            size = 2 + code.size + scalars.size
            if size > self.sizes[i]:
                raise RuntimeError(f"{type(optimizer).__name__}: step {step0 + 1} of "
                                   f"{spec.name} on {p.name} needs a program larger than "
                                   f"the graph was compiled for ({size} > {self.sizes[i]} "
                                   "numbers); run this spec in PyNative")
            at = self.offsets[i]
            out[1 + i] = at
            out[at:at + size] = np.concatenate([[code.size, scalars.size], code, scalars])
        optimizer.skipped.append(False)
        return out


_warned_devices: set = set()


@dataclass
class GraphChoice:
    """The graph form an optimizer compiles into: ``form`` "custom" or "ops" ("" where
    none can run: ``refusal`` says why), the built form (:class:`GraphStep` or
    :class:`.graph_ops.OpsGraph`) and ``why`` (for ``uo.explain``)."""

    form: str
    built: object
    refusal: str
    why: str


def choose(optimizer, option: str, total_steps: int | None) -> GraphChoice:
    """The graph form of ``optimizer`` for ``options={"graph": option}`` (see the
    module); each form is built only when it is tried."""
    if option not in GRAPH_FORMS:
        raise ValueError(f"graph must be one of {GRAPH_FORMS}, got {option!r}")
    common = common_refusal(optimizer)
    if common:
        return GraphChoice("", None, common, common)
    cpu = on_cpu()
    device = ms.get_context("device_target")
    if option == "auto":
        if not cpu:
            order, why = ["ops"], (f"{_FORM_NAMES['ops']} (graph='ops'; the device_target "
                                   f"is {device!r}, and the custom operators run on the CPU "
                                   "only)")
        elif optimizer._kernels is None:
            order, why = ["ops"], (f"{_FORM_NAMES['ops']} (graph='ops'; the kernel VM is off: "
                                   "options compile=False)")
        else:
            first, measured = cpu_choice(optimizer.spec.name)
            order = [first, "ops" if first == "custom" else "custom"]
            why = f"{_FORM_NAMES[first]} (graph={first!r}; {measured})"
    else:
        order, why = [option], f"{_FORM_NAMES[option]} (options graph={option!r})"
    form_why = {"custom": "graph='custom'", "ops": "graph='ops'"}
    refusals = []
    for form in order:
        built = GraphStep(optimizer) if form == "custom" else \
            OpsGraph(optimizer, total_steps=total_steps, on_cpu=cpu)
        if not built.refusal:
            if form != order[0]:
                why = (f"{_FORM_NAMES[form]} ({form_why[form]}), as {_FORM_NAMES[order[0]]} "
                       f"cannot run it: {refusals[0]}")
            if form == "ops" and not cpu:
                _warn_unverified(device)
                why += (f"; not verified on {device} (docs/devices.md: verified on the CPU "
                        "only)")
            return GraphChoice(form, built, "", why)
        refusals.append(built.refusal)
    text = "; ".join(refusals)
    return GraphChoice("", None, text, f"in a graph it is refused: {text}")


_FORM_NAMES = {"custom": "custom operators over the kernel VM", "ops": "the update as "
               "MindSpore operations"}


def _warn_unverified(device: str) -> None:
    from unified_opt.devices import UnverifiedDeviceWarning

    if device in _warned_devices:
        return
    _warned_devices.add(device)
    warnings.warn(f"unified_opt: in GRAPH_MODE or @ms.jit the own MindSpore optimizer runs "
                  f"as MindSpore operations (options graph='ops'), which has been verified "
                  f"on the CPU only, not on {device} (docs/devices.md); compare a few steps "
                  "with PyNative there before relying on it", UnverifiedDeviceWarning,
                  stacklevel=5)
