"""The own update through ``torch.compile``: a spec's ``update`` traced into one Inductor
kernel per (spec, dtype, rank of the tensor) that reads the parameter, the gradient and
the state once and writes them back in place. The path of CUDA tensors with
``compile="auto"`` or True, and of any tensor with ``compile="inductor"`` (CPU tensors
otherwise take the kernel VM, :mod:`.kernels`).

The math stays the spec's: the kernel is the spec's ``update`` traced with the torch
ops binding, followed by in-place copies into the parameter and the state tensors, which
Inductor fuses into the update's loops, so a step allocates no full-size temporaries.
The lr and the step count are symbolic (``dynamic=True``): a schedule does not
recompile. Inductor may contract ``a * b + c`` into one rounding (FMA) and reorder
reductions, so the compiled numbers differ from the eager ones by float32 rounding,
inside the conformance noise floor (``tests/test_torch_fast.py``).

From which step (:func:`first_compiled_step`):

* ``"auto"``: from the step at which the eager steps taken would have cost about one
  compile (:data:`COMPILE_SECONDS`), estimated from the optimizer's element count at
  :data:`EAGER_NS_PER_ELEMENT`: a 4096x4096 parameter compiles after 20 steps, 1M
  elements after 318, the conformance suite's 4,400 never within 50. The rule depends
  only on the element count and the step, so every data-parallel rank switches at the
  same step and the ranks stay bitwise equal. Inductor's on-disk cache
  (``TORCHINDUCTOR_CACHE_DIR``, by default under the system temp folder) makes a later
  process's compile of the same kernel several times faster.
* ``True`` and ``"inductor"``: from the first step; ``False``: never.

Where Inductor cannot compile (no C++ compiler on a CPU machine: ``BackendCompilerFailed``
at the first compiled step), "auto" warns once and goes on eagerly, the same update;
``True`` and ``"inductor"`` raise the error.

Not compiled (eager, whatever the option): specs whose hyperparameters change per step
(``spec.varies_per_step()``: each step would be a new kernel), a data-parallel spec in
a process group (its exchange runs collectives between the update's halves), host
offload (the update runs on host copies), and devices other than CPU and CUDA.
"""

from __future__ import annotations

import math
import types

import torch

from .ops import torch_ops

#: what the "auto" rule assumes one compile costs (measured cold, 2-core CPU: 3 to 12 s
#: per spec; warm from Inductor's cache: 1 to 3 s)
COMPILE_SECONDS = 10.0
#: what the "auto" rule assumes an eager own step costs per element (measured, 2-core
#: CPU, one 4096x4096 float32 parameter: Adam 26 ns, Lamb 23, LARS/Lion 11, CAME 54)
EAGER_NS_PER_ELEMENT = 30.0
#: the ``compile`` option's values on torch (the own optimizer's docstring says what each
#: does)
MODES = ("auto", True, False, "inductor")

_kernels: dict = {}


def check_mode(value) -> object:
    """The ``compile`` option, checked."""
    if value not in MODES or isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"build: options compile must be one of {MODES}, got {value!r}")
    return value


def first_compiled_step(mode, numel: int) -> float:
    """The 1-based step from which Inductor runs the update (inf: never): ``mode``
    "auto" by the rule above, True from the first step, False never."""
    if mode in (True, "inductor"):
        return 1
    if mode is False or numel == 0:
        return math.inf
    eager_seconds = EAGER_NS_PER_ELEMENT * 1e-9 * numel
    return max(1, math.ceil(COMPILE_SECONDS / eager_seconds))


def compilable(spec, tensor: torch.Tensor) -> bool:
    """Whether this parameter's update can run compiled (see the module)."""
    return (not spec.varies_per_step() and tensor.device.type in ("cpu", "cuda")
            and tensor.numel() > 0)


def kernel(spec):
    """The compiled in-place step of ``spec``: ``kernel(param, grad, state, lr, step)``
    updates ``param`` and the tensors of ``state`` in place."""
    if spec not in _kernels:
        def step(param, grad, state, lr, step):
            new_param, new_state = spec.update(param, grad, state, lr=lr, step=step,
                                               ops=torch_ops)
            param.copy_(new_param)
            for key, value in new_state.items():
                state[key].copy_(value)

        # torch.compile keeps its cache (and its recompile limit) per code object: one
        # code object per spec, so that specs do not evict each other's kernels
        code = step.__code__.replace(co_name=f"uo_{spec.name}_step_{len(_kernels)}")
        unique = types.FunctionType(code, step.__globals__, code.co_name, None,
                                    step.__closure__)
        _kernels[spec] = torch.compile(unique, dynamic=True, fullgraph=False)
    return _kernels[spec]
