"""The portable state as a dict: ``opt.state_dict()`` and ``opt.load_state_dict(d)`` on
every optimizer ``uo.build`` returns (torch, Paddle and MindSpore; native classes and the
own path).

The form is the same on every framework, and holds what the state file holds
(:mod:`.state_encoding`)::

    {"format": "unified-opt-state/1",
     "metadata": {str: str, ...},          # exactly the file's metadata, sha256 included
     "tensors": {"state/<name>/<slot>": T, "step/<name>": T, ...}}

``T`` are tensors of the optimizer's framework (``torch.Tensor``, ``paddle.Tensor``,
``mindspore.Tensor``; on the CPU), each in its storage dtype (bfloat16 state as that
framework's bfloat16; ``step/<name>`` int64 ``[1]``). They are copies: the dict shares
no memory with the live state (torch's own ``state_dict`` shares it), so stepping on
after ``state_dict()`` leaves the dict as it was, and holding the dict costs one copy of
the state. Nothing in it is a Python object of ours, so ``torch.save`` /
``torch.load(weights_only=True)`` and ``paddle.save`` / ``paddle.load`` round-trip it.
An optimizer built over parameters without names (``uo.build(spec,
model.parameters())``) names each by its position in the build (``"0"``, ``"1"``, ...),
as torch's own ``state_dict`` keys its state: such a dict loads into an optimizer built
over the same parameters in the same order (``uo.save_state`` wants real names, which
carry across frameworks and models).

``load_state_dict`` takes the form from any framework: the tensors of any of the three,
or numpy arrays (bfloat16 as :data:`~.snapshot.BFLOAT16` bits), each read through numpy
into a copy of its own. It checks exactly what ``uo.load_state`` checks of a file
(format, the sha256 digest over metadata and tensors, spec, groups, parameter names,
each state array's name, shape and dtype, the data-parallel rank) before anything is
written: on a refusal the optimizer is unchanged. ``transform`` and ``model``: as for
``uo.load_state`` (a dict written on another framework is read under ``model``'s names
and layouts).

The framework's own form stays: each framework's loader tells the two apart
(:func:`load_either`) and hands its own form to the framework's own load, and the
framework's own ``state_dict`` stays reachable through the class
(``torch.optim.Optimizer.state_dict(opt)``, ``paddle.optimizer.Optimizer.state_dict(opt)``,
``mindspore.nn.Cell.state_dict(opt)``) for tools that need it
(``torch.distributed.checkpoint``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from ..backend import framework_of
from .snapshot import BFLOAT16, FILE_DTYPES, bfloat16_bits, dtype_name
from .state_across import Transform
from .state_encoding import FORMAT, decoded, encoded

#: the keys of the portable form
KEYS = ("format", "metadata", "tensors")


def state_dict_of(optimizer: Any, owner: str) -> dict[str, Any]:
    """``optimizer``'s state in the portable form (module docstring), its tensors copies
    in ``optimizer``'s framework (``owner``: the class name in errors)."""
    from .state import _framework, _record, snapshot_of

    caller = f"{owner}.state_dict"
    if _record(optimizer) is None:
        raise TypeError(f"{caller}: optimizer must be made by uo.build, got "
                        f"{type(optimizer).__name__}")
    framework = _framework(optimizer, caller)
    try:
        snapshot = snapshot_of(optimizer, caller=caller, by_position=True)
    except ValueError as error:
        # the backends' refusals name save_state: the dict holds what its file holds
        text = str(error)
        if not text.startswith("save_state: "):
            raise
        raise ValueError(f"{caller}: {text.removeprefix('save_state: ')} (the state dict "
                         "holds what a uo.save_state file holds)") from None
    metadata, arrays = encoded(snapshot, caller)
    to_tensor = _TO_TENSOR[framework]
    return {"format": FORMAT, "metadata": dict(metadata),
            "tensors": {key: to_tensor(array) for key, array in arrays.items()}}


def is_portable(state_dict: Any) -> bool:
    """Whether ``state_dict`` is a mapping with exactly the portable form's keys."""
    return isinstance(state_dict, Mapping) and set(state_dict) == set(KEYS)


def load_either(optimizer: Any, state_dict: Any, *, owner: str, method: str,
                own_form: Callable[[Mapping], bool], own_name: str,
                load_own: Callable[[Mapping], Any], transform: Transform | None = None,
                model: Any = None) -> Any:
    """``optimizer``'s ``method`` (``load_state_dict``, Paddle's ``set_state_dict``):
    the portable form is loaded here (:func:`load_portable`); a dict ``own_form`` accepts
    (the framework's own form, ``own_name`` in errors) goes to ``load_own``, whose result
    is returned. Another dict is a ValueError naming its keys, another object a
    TypeError; ``transform`` or ``model`` with the framework's own form, a ValueError
    (its loader reads neither)."""
    caller = f"{owner}.{method}"
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"{caller}: state_dict must be a dict (what state_dict() returns), "
                        f"got {type(state_dict).__name__}")
    if is_portable(state_dict):
        return load_portable(optimizer, state_dict, transform=transform, model=model,
                             caller=caller)
    if not any(key in state_dict for key in KEYS) and own_form(state_dict):
        if transform is not None or model is not None:
            raise ValueError(f"{caller}: transform and model apply to the portable form "
                             f"(what state_dict() returns), not to {own_name}")
        return load_own(state_dict)
    raise ValueError(f"{caller}: state_dict has keys {sorted(map(str, state_dict))}, which "
                     f"is neither the portable form (keys {list(KEYS)}: what state_dict() "
                     f"returns) nor {own_name}")


def load_portable(optimizer: Any, state_dict: Mapping, *, transform: Transform | None = None,
                  model: Any = None, caller: str = "load_state_dict") -> None:
    """Load the portable form ``state_dict`` (tensors of any framework, or numpy arrays)
    into ``optimizer`` with ``uo.load_state``'s checks, all before anything is written."""
    from .state import load_snapshot

    if state_dict["format"] != FORMAT:
        raise ValueError(f"{caller}: state_dict['format'] is {state_dict['format']!r}, "
                         f"expected {FORMAT!r}")
    metadata, tensors = state_dict["metadata"], state_dict["tensors"]
    if not isinstance(metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError(f"{caller}: state_dict['metadata'] must be a dict of strings to "
                        f"strings, got {type(metadata).__name__}")
    if not isinstance(tensors, Mapping) or not all(isinstance(k, str) for k in tensors):
        raise TypeError(f"{caller}: state_dict['tensors'] must be a dict of names to "
                        f"tensors, got {type(tensors).__name__}")
    arrays = {key: _numpy(value, key, caller) for key, value in tensors.items()}
    saved = decoded(metadata, arrays, caller=caller, what="the state dict", kind="state dict")
    load_snapshot(optimizer, saved, transform=transform, model=model, caller=caller,
                  source="the state dict", by_position=True)


# -- tensors to numpy and back ------------------------------------------------------------

def _numpy(value: Any, key: str, caller: str) -> np.ndarray:
    """``value`` (a tensor of any framework, or a numpy array) as a numpy array of its own
    (a copy), bfloat16 as :data:`BFLOAT16` bits."""
    framework = framework_of(value)
    if isinstance(value, np.ndarray):
        array = np.array(value, order="C")
    elif framework == "torch" and hasattr(value, "detach"):
        tensor = value.detach().cpu().contiguous()
        if str(tensor.dtype) == "torch.bfloat16":
            array = tensor.float().numpy()
        else:
            array = np.array(tensor.numpy(), order="C")
    elif framework == "paddle" and hasattr(value, "numpy"):
        array = (value.astype("float32") if str(value.dtype) == "paddle.bfloat16"
                 else value).numpy()
        array = np.array(array, order="C")
    elif framework == "mindspore" and hasattr(value, "asnumpy"):
        if str(value.dtype) == "BFloat16":
            import mindspore

            value = value.astype(mindspore.float32)
        array = np.array(value.asnumpy(), order="C")
    else:
        raise TypeError(f"{caller}: state_dict['tensors'][{key!r}] must be a torch, Paddle "
                        f"or MindSpore tensor or a numpy array, got {type(value).__name__}")
    if framework is not None and _is_bfloat16(value):
        return bfloat16_bits(array)           # exact: float32 holds every bfloat16 value
    if array.dtype not in FILE_DTYPES.values():
        raise TypeError(f"{caller}: state_dict['tensors'][{key!r}] is "
                        f"{dtype_name(array.dtype)}, which the portable form does not hold "
                        f"(one of {sorted(map(dtype_name, FILE_DTYPES.values()))})")
    return array


def _is_bfloat16(tensor: Any) -> bool:
    return str(tensor.dtype) in ("torch.bfloat16", "paddle.bfloat16", "BFloat16")


def _float32(bits: np.ndarray) -> np.ndarray:
    """:data:`BFLOAT16` bits as the float32 values they are (exact)."""
    return (bits.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _torch_tensor(array: np.ndarray):
    import torch

    if array.dtype == BFLOAT16:
        return torch.from_numpy(np.array(array.view(np.int16))).view(torch.bfloat16)
    return torch.from_numpy(np.array(array))


def _paddle_tensor(array: np.ndarray):
    import paddle

    if array.dtype == BFLOAT16:
        return paddle.to_tensor(_float32(array), place=paddle.CPUPlace()).astype("bfloat16")
    return paddle.to_tensor(np.array(array), place=paddle.CPUPlace())


def _mindspore_tensor(array: np.ndarray):
    import mindspore

    if array.dtype == BFLOAT16:
        return mindspore.Tensor(_float32(array)).astype(mindspore.bfloat16)
    return mindspore.Tensor(np.array(array))


#: each framework's tensor of a numpy array (a copy)
_TO_TENSOR = {"torch": _torch_tensor, "paddle": _paddle_tensor,
              "mindspore": _mindspore_tensor}
