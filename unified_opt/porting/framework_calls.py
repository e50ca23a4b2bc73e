"""How a Paddle or MindSpore optimizer's own calls read in a script ported to another
framework: Paddle's methods (``clear_grad``, ``get_lr``, ``set_state_dict``, a
``paddle.save`` of its state: finder's ``PADDLE_METHODS``) as torch and MindSpore write
them, or why they cannot; MindSpore's attributes and checkpoint functions (finder's
``MINDSPORE_ATTRIBUTES``, ``MINDSPORE_CHECKPOINTS``); and a Paddle ``grad_clip`` argument
read into the spec's clip."""

from __future__ import annotations

from .finder import SAVED_STATE_DICT

#: Paddle's clip classes as a script names them: the class name after one of these
PADDLE_CLIP_MODULES = ("", "nn.", "paddle.nn.", "paddle.nn.clip.")


def paddle_clip(reader, c, node):
    """Paddle's ``grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)`` (or ``ClipGradByNorm``,
    ``ClipGradByValue``) with literal arguments, as the spec's clip by the presets' rule
    (:func:`unified_opt.clipping.paddle_clip`), or None for ``grad_clip=None``."""
    import libcst as cst

    from ..clipping import PADDLE_CLIPS
    from ..clipping import paddle_clip as clip_of

    code = reader.code(node)
    if code == "None":
        return None
    func = reader.code(node.func) if isinstance(node, cst.Call) else ""
    module, _, kind = func.rpartition(".")
    module = module + "." if module else ""
    if module not in PADDLE_CLIP_MODULES or kind not in PADDLE_CLIPS:
        raise ValueError(f"grad_clip={code} is not a paddle.nn.ClipGradByGlobalNorm, "
                         "ClipGradByNorm or ClipGradByValue call")
    known = PADDLE_CLIPS[kind]
    values = {}
    for position, arg in enumerate(node.args):
        if arg.star or (arg.keyword is None and position >= len(known)):
            raise ValueError(f"grad_clip={code}: arguments other than "
                             f"{', '.join(known)} are not read")
        key = known[position] if arg.keyword is None else arg.keyword.value
        if key not in known:
            raise ValueError(f"grad_clip={code}: {key} is not read (only "
                             f"{', '.join(known)})")
        values[key] = float(reader.literal(c, f"grad_clip's {key}", arg.value))
    if known[0] not in values:
        raise ValueError(f"grad_clip={code} has no {known[0]}")
    return clip_of(kind, values)


def torch_method(variable: str, call, method: str) -> tuple[str | None, str]:
    """A Paddle optimizer's method call (``finder.PADDLE_METHODS``) as torch writes it, and
    why; None and the reason where torch has no expression for it (marked)."""
    import libcst as cst

    args = list(call.args)
    if method in ("clear_grad", "clear_gradients"):
        # Paddle's default set_to_zero=True zeroes the gradients in place: torch's
        # zero_grad(set_to_none=False); set_to_zero=False releases them: set_to_none=True
        given = [a for a in args if a.keyword is None or a.keyword.value == "set_to_zero"]
        value = given[0].value if given else cst.Name("True")
        if len(args) > 1 or (args and not given) or not (
                isinstance(value, cst.Name) and value.value in ("True", "False")):
            return None, (f"{variable}.{method}(...): only a literal set_to_zero maps to "
                          "torch's zero_grad(set_to_none=...)")
        return (f"{variable}.zero_grad(set_to_none={value.value == 'False'})",
                f"torch's spelling of Paddle's {method} (set_to_zero={value.value} zeroes "
                f"{'in place' if value.value == 'True' else 'by releasing the gradients'})")
    if method == "get_lr" and not args:
        return (f"{variable}.param_groups[0]['lr']",
                "torch keeps the lr in param_groups (the first group's: Paddle's get_lr "
                "gives the optimizer's one lr)")
    if method in ("set_state_dict", SAVED_STATE_DICT):
        return None, state_dict_refusal(variable, "torch", method)
    return None, f"{variable}.{method}(...): torch's optimizers have no {method}; " + (
        f"write the lr into each group ({variable}.param_groups[i]['lr'] = lr)"
        if method == "set_lr" else f"call loss.backward(), then {variable}.step()")


def state_dict_refusal(variable: str, to: str, method: str) -> str:
    head = (f"paddle.save({variable}.state_dict(), ...): paddle.save does not hold {to} "
            "tensors" if method == SAVED_STATE_DICT else
            f"{variable}.set_state_dict(...): {to}'s optimizer has no set_state_dict, and "
            f"paddle.save/paddle.load do not hold {to} tensors")
    return (f"{head}; save and load the optimizer's state with uo.save_state({variable}, "
            f"path) / uo.load_state({variable}, path) (a file every framework reads)")


def mindspore_read(variable: str, attribute: str, to: str) -> str:
    """Why a MindSpore optimizer's ``attribute`` (finder's ``MINDSPORE_ATTRIBUTES``, or
    a checkpoint function handed it) is marked in a script ported to ``to``."""
    if attribute in ("save_checkpoint", "load_param_into_net"):
        return (f"mindspore.{attribute}({variable}, ...): {to}'s optimizer is no Cell of "
                f"Parameters; save and load its state with uo.save_state({variable}, path) "
                f"/ uo.load_state({variable}, path) (a file every framework reads)")
    if attribute == "get_lr":
        return (f"{variable}.get_lr(): MindSpore's lr of the current step; {to}'s optimizer "
                f"keeps it in param_groups: {variable}.param_groups[0]['lr'] (a float)")
    if attribute == "parameters":
        return (f"{variable}.parameters: the MindSpore optimizer's parameters (handed to "
                f"value_and_grad, ported with the model's forward and backward); {to}'s "
                f"keeps them in param_groups ([p for g in {variable}.param_groups for p in "
                "g['params']]), and its gradients come from loss.backward()")
    key = "lr" if attribute == "learning_rate" else attribute
    return (f"{variable}.{attribute}: MindSpore's {attribute} Parameter; {to}'s optimizer "
            f"keeps it in param_groups (write {variable}.param_groups[i]['{key}'] for each "
            "group, between steps)")


def mindspore_method(variable: str, call, method: str) -> tuple[str | None, str]:
    """A Paddle optimizer's method call as the MindSpore optimizer ``uo.build`` makes
    takes it, and why; None and the reason where it has none (marked)."""
    if method == "get_lr" and not call.args:
        return (f"{variable}.param_groups[0]['lr']",
                "the optimizer uo.build makes keeps the lr in param_groups, as a float "
                "(MindSpore's own get_lr gives a Parameter)")
    if method in ("set_state_dict", SAVED_STATE_DICT):
        return None, state_dict_refusal(variable, "mindspore", method)
    if method in ("clear_grad", "clear_gradients"):
        return None, (f"{variable}.{method}(): MindSpore parameters keep no gradients (a "
                      "train step computes them with mindspore.value_and_grad and passes "
                      "them to the optimizer): remove it")
    return None, f"{variable}.{method}(...): MindSpore's optimizers have no {method}; " + (
        f"write the lr into each group ({variable}.param_groups[i]['lr'] = lr)"
        if method == "set_lr" else "compute the gradients with mindspore.value_and_grad, "
        f"then call {variable}(grads)")
