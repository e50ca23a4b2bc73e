"""What every Paddle descriptor shares: :class:`PaddleClass` and the readers of Paddle's
argument forms (``learning_rate`` as a float or LRScheduler, ``weight_decay`` as a float
or ``L2Decay``, ``grad_clip`` as a ``paddle.nn.ClipGradBy*``) used by the presets.
Imports no framework: Paddle objects are recognised by their class names."""

from __future__ import annotations

from dataclasses import dataclass

from unified_opt.clipping import PADDLE_CLIPS, paddle_clip
from unified_opt.native import NativeClass, when
from unified_opt.presets._registry import require_float, unsupported
from unified_opt.schedules import Schedule


@dataclass(frozen=True, kw_only=True)
class PaddleClass(NativeClass):
    """A Paddle optimizer class.

    ``decay_keyword``: the keyword of its weight decay, also a parameter-group key ("":
    it has none); ``decay_selector``: the keyword of the argument choosing which
    parameters decay ("": none; the build derives it from the spec's name rules);
    ``parameters_keyword``: the keyword of the parameter list; ``parameter_shaped_scalars``:
    spec states that are one 0-d value per parameter, which Paddle keeps as an
    accumulator of the parameter's shape with every element equal; ``no_groups``: why
    the class cannot take Paddle's dict parameter groups ("": it can);
    ``refuses_nonfinite``: a step with a non-finite gradient is refused before it runs
    (the class computes garbage from one, see ``nonfinite``)."""

    lr_keyword: str = "learning_rate"
    decay_keyword: str = "weight_decay"
    decay_selector: str = ""
    parameters_keyword: str = "parameters"
    parameter_shaped_scalars: tuple[str, ...] = ()
    no_groups: str = ""
    refuses_nonfinite: bool = False


NOT_MAXIMIZE = when("maximize=False (Paddle optimizers have no maximize flag)",
                    lambda s: not s.maximize)
#: kernels that take their hyperparameters as float32 attributes: what the conformance
#: floor's float32-hyperparameter reference covers
FLOAT32_ATTRIBUTES = "its kernel holds the hyperparameters in float32"


def betas_epsilon(s) -> dict:
    return {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "epsilon": float(s.eps)}


def l2_coefficient(qualified_name: str, weight_decay) -> float:
    """Paddle's ``weight_decay``: None, a float (L2Decay) or an ``L2Decay`` object."""
    if weight_decay is None:
        return 0.0
    kind = type(weight_decay).__name__
    if kind == "L2Decay":
        return float(weight_decay._coeff)
    if kind == "L1Decay":
        raise unsupported(qualified_name, "weight_decay", weight_decay,
                          "L1 regularisation has no spec knob")
    if isinstance(weight_decay, int) and not isinstance(weight_decay, bool):
        # Paddle accepts an int at construction and fails inside step() (measured:
        # paddle 3.3's regularizer multiplies a float32 tensor by a Python int there).
        raise TypeError(f"{qualified_name}: weight_decay must be a float or L2Decay, got "
                        f"the int {weight_decay!r}")
    return weight_decay


def _is_paddle(value, class_name: str) -> bool:
    """Whether ``value`` is an instance of Paddle's ``class_name`` (read from its class
    hierarchy: presets never import paddle)."""
    return any(k.__name__ == class_name and (k.__module__ or "").startswith("paddle")
               for k in type(value).__mro__)


def grad_clip_spec(qualified_name: str, grad_clip):
    """Paddle's ``grad_clip`` as the spec's (:func:`unified_opt.clipping.paddle_clip`:
    ``ClipGradByGlobalNorm(c)`` is ``ClipByGlobalNorm(c, per_group=True)``, ...;
    ``auto_skip_clip`` and ``group_name`` give the same numbers in dygraph)."""
    if grad_clip is None:
        return None
    kind = type(grad_clip).__name__
    if not _is_paddle(grad_clip, "ClipGradBase"):
        raise TypeError(f"{qualified_name}: grad_clip must be None or a paddle.nn "
                        f"ClipGradByGlobalNorm, ClipGradByNorm or ClipGradByValue, got "
                        f"{grad_clip!r} of type {kind}")
    if kind not in PADDLE_CLIPS or (type(grad_clip).__module__ or "").split(".")[0] != "paddle":
        raise NotImplementedError(f"{qualified_name}: grad_clip={grad_clip!r} of type {kind} "
                                  "has no spec clip (known: paddle.nn.ClipGradByGlobalNorm, "
                                  "ClipGradByNorm, ClipGradByValue)")
    return paddle_clip(kind, {name: getattr(grad_clip, name) for name in PADDLE_CLIPS[kind]})


def learning_rate_spec(qualified_name: str, learning_rate):
    """Paddle's ``learning_rate``: a float, or a schedule (Paddle takes an LRScheduler;
    here its spec, ``uo.schedules.preset('paddle.optimizer.lr.<Name>', ...)``)."""
    if isinstance(learning_rate, Schedule):
        return learning_rate
    if _is_paddle(learning_rate, "LRScheduler"):
        raise TypeError(f"{qualified_name}: learning_rate={learning_rate!r} is a Paddle "
                        "LRScheduler; give its spec, uo.schedules.preset("
                        f"'paddle.optimizer.lr.{type(learning_rate).__name__}', <its "
                        "arguments>)")
    return require_float(qualified_name, "learning_rate", learning_rate)


def no_decay_callable(qualified_name: str, argument: str, value, receives: str) -> None:
    if value is not None:
        raise NotImplementedError(
            f"{qualified_name}: {argument}={value!r} is a Python callable (Paddle calls it "
            f"with {receives}), which the preset cannot turn into a name rule; give the "
            "parameters it leaves undecayed as a group, uo.build(spec, params, groups=["
            "uo.Group(match=('*.bias', '*norm*'), exclude_from=('weight_decay',))]) "
            "(shell patterns or a callable on the parameter name), or as name patterns in "
            "the spec, spec.replace(no_decay_names=('*bias', '*norm*'))")


def clip_norm(q: str, grad_clip):
    """``ClipGradByNorm(c)`` -> c (the only clip DGC takes; Paddle raises TypeError else)."""
    if grad_clip is None:
        return None
    if type(grad_clip).__name__ not in ("ClipGradByNorm", "GradientClipByNorm"):
        raise TypeError(f"{q}: grad_clip must be ClipGradByNorm, got {grad_clip!r}")
    return float(grad_clip.clip_norm)
