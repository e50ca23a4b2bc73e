"""The own update through ``torch.compile`` (``options={"compile": "inductor"}``): a spec's
``update`` traced into one Inductor kernel per (spec, dtype, rank of the tensor) that
reads the parameter, the gradient and the state once and writes them back in place, from
the first step. (CPU tensors otherwise take the kernel VM, :mod:`.kernels`; CUDA tensors
the multi-tensor Triton kernels, :mod:`.cuda`.)

The math stays the spec's: the kernel is the spec's ``update`` traced with the torch
ops binding, followed by in-place copies into the parameter and the state tensors, which
Inductor fuses into the update's loops, so a step allocates no full-size temporaries.
The lr and the step count are symbolic (``dynamic=True``): a schedule does not
recompile. Inductor may contract ``a * b + c`` into one rounding (FMA) and reorder
reductions, so the compiled numbers differ from the eager ones by float32 rounding,
inside the conformance noise floor (``tests/test_torch_fast.py``) except where the
update decides by a sign or a comparison on a value within that rounding of its
threshold (Lion's sign): there a contracted kernel can take the other side. Where
Inductor cannot compile (no C++ compiler on a CPU machine) the error is raised.

Not compiled (eager): specs whose hyperparameters change per step
(``spec.varies_per_step()``: each step would be a new kernel), a data-parallel spec in
a process group (its exchange runs collectives between the update's halves), host
offload (the update runs on host copies), and devices other than CPU and CUDA.
"""

from __future__ import annotations

import types

import torch

from unified_opt.storage import rounds

from .ops import torch_ops

#: the ``compile`` option's values on torch (the own optimizer's docstring says what each
#: does)
MODES = ("auto", True, False, "inductor")

_kernels: dict = {}


def check_mode(value) -> object:
    """The ``compile`` option, checked."""
    if value not in MODES or isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"build: options compile must be one of {MODES}, got {value!r}")
    return value


def compilable(spec, tensor: torch.Tensor) -> bool:
    """Whether this parameter's update can run compiled (see the module)."""
    return (not spec.varies_per_step() and tensor.device.type in ("cpu", "cuda")
            and tensor.numel() > 0
            # Inductor's bfloat16 code rounds where its graph says: the spec's storage
            # rounding (unified_opt.storage) runs eagerly
            and not rounds(spec, str(tensor.dtype).removeprefix("torch.")))


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
