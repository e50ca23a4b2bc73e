"""The own optimizer compiled into a MindSpore graph: GRAPH_MODE, a GRAPH_MODE
``nn.TrainOneStepCell`` or ``ms.Model.train``, an ``@ms.jit`` step that calls
``opt(grads)``.

The graph holds, per step, one ``ops.Custom(..., func_type="pyfunc")`` operator and one
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

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype

from unified_opt.kernels import build
from unified_opt.kernels.trace import Untraceable
from unified_opt.pre_step import has_pre_step

from .kernels import on_cpu

#: the steps whose programs size each parameter's segment
PROBE_STEPS = (1, 2, 3, 4, 5, 6, 8, 10, 16, 32, 100, 1000, 10**4, 10**5)


def refusal(optimizer) -> str:
    """Why ``optimizer`` cannot run compiled into a graph ("" when it can)."""
    owner = f"{type(optimizer).__name__} ({optimizer.spec.name})"
    if optimizer._kernels is None:
        why = ("options compile=False" if optimizer.compile_mode is False else
               "a data-parallel spec exchanges between the ranks in Python")
        return f"{owner} runs eagerly here ({why}); in GRAPH_MODE or @ms.jit it cannot run"
    if not on_cpu():
        return (f"{owner}: compiled into a graph it runs custom CPU operators, and the "
                f"device_target is {ms.get_context('device_target')!r}; run it in PyNative "
                "(where its update runs as framework operations on that device)")
    if has_pre_step(optimizer.spec):
        return (f"{owner}: its gradient pre-step (grad_clip, loss_scale, skip_nonfinite, "
                "grad_centralization) runs in Python on PyNative only; in a graph, clip and "
                "scale in the train step (e.g. ops.clip_by_global_norm) and build the spec "
                "without them")
    return ""


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
            self.sizes = [max(self._segment(runner, p, plan, step) for step in PROBE_STEPS)
                          for p, plan in zip(optimizer._parameters, optimizer._plans)]
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
        return 2 + code.size + scalars.size

    def packed(self, global_step, learning_rate) -> np.ndarray:
        """The host operator's function (see the module)."""
        optimizer = self.optimizer
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
