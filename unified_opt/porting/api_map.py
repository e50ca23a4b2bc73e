"""The framework calls ``unified-opt port`` maps from a torch script, and what each becomes
on Paddle and MindSpore (:mod:`.mapper` applies them).

The port keeps the user's code -- expressions, variables, function parameters, the code
building parameter groups, ``param_groups`` loops -- and maps only these calls, the way an
API converter does. Values stay expressions read at run time: nothing is evaluated while
porting.

* **optimizers** (:func:`optimizer_preset`): ``torch.optim.X(params, ...)`` becomes
  ``uo.build(uo.preset("torch.optim.X", ...), params)``. The preset keeps torch's
  conventions and argument names exactly; it validates the arguments at run time, which is
  where a ``**kwargs`` that cannot be read statically is checked (an unknown key is a
  TypeError; ``fused``/``foreach``/``capturable`` choose torch's kernel, not the numbers:
  the preset warns that the spec does not carry them, and ``uo.build`` chooses the
  target's own fastest exact path);
* **schedulers** (:data:`SCHEDULERS`): torch's and the Trainer-style helpers become
  ``uo.lr_scheduler.<the same name>(optimizer, ...)``, torch's arguments and numbers,
  driving the optimizer through ``param_groups``;
* **clipping** (:data:`CLIPS`): ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_``
  become ``uo.clip_grad_norm_`` / ``uo.clip_grad_value_`` (same signature) on Paddle;
  MindSpore keeps no gradient on parameters, so there a norm clip right before the one
  optimizer's step becomes that optimizer's ``grad_clip=uo.ClipByGlobalNorm(max_norm,
  eps=1e-6)`` (torch divides by the norm + 1e-6);
* **parameter selection** (:data:`METHODS`, :data:`CLASSES`): the module methods and the
  ``torch.nn`` classes a script tests parameters and modules with, as the target spells
  them. MindSpore names a ``LayerNorm``'s parameters ``gamma``/``beta`` and an
  ``Embedding``'s ``embedding_table``, so ``named_parameters()`` there becomes
  ``uo.porting.named_parameters(module)``: MindSpore's parameters under torch's names
  (``ln.weight``), which the script's own name tests were written against;
* **optimizer state** (:data:`STATE`): ``torch.save(optimizer.state_dict(), path)`` and
  ``optimizer.load_state_dict(torch.load(path))`` become ``uo.save_state`` /
  ``uo.load_state`` (one safetensors file, readable on every framework).

``Tensor`` methods both targets spell as torch does (``p.dim()``, ``p.ndim``,
``p.requires_grad``; MindSpore's ``p.numel()``) stay as written.
"""

from __future__ import annotations

#: torch's scheduler classes and the Trainer-style helpers (by qualified name, as the
#: script's imports resolve them) -> the name in ``uo.lr_scheduler``
SCHEDULERS = {
    **{f"torch.optim.lr_scheduler.{name}": name for name in (
        "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ExponentialLR",
        "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "LinearLR", "ConstantLR",
        "PolynomialLR", "OneCycleLR", "CyclicLR", "SequentialLR", "ChainedScheduler",
        "ReduceLROnPlateau")},
    **{f"{module}.{name}": name for module in ("transformers", "transformers.optimization")
       for name in ("get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
                    "get_constant_schedule_with_warmup")},
}
#: what a scheduler's module path starts with: a name there missing from SCHEDULERS is
#: a scheduler the port does not map (marked)
SCHEDULER_MODULES = ("torch.optim.lr_scheduler.", "transformers.optimization.get_",
                     "transformers.get_")

#: torch's gradient clips -> ("norm" | "value", the uo function of the same signature)
CLIPS = {
    "torch.nn.utils.clip_grad_norm_": ("norm", "clip_grad_norm_"),
    "torch.nn.utils.clip_grad.clip_grad_norm_": ("norm", "clip_grad_norm_"),
    "torch.nn.utils.clip_grad_value_": ("value", "clip_grad_value_"),
    "torch.nn.utils.clip_grad.clip_grad_value_": ("value", "clip_grad_value_"),
}
#: the positional names of torch's clip_grad_norm_ (clip_grad_value_: parameters,
#: clip_value, foreach)
CLIP_NORM_ARGUMENTS = ("parameters", "max_norm", "norm_type", "error_if_nonfinite", "foreach")

#: module method -> target -> how the call is written there: a format string over
#: ``{receiver}`` (the object's code) and ``{args}`` (the call's arguments, keywords
#: renamed by :data:`KEYWORDS`); None: the target spells it as torch does. Applied to a
#: call of that method on any object, as an API converter does (a script's own class with
#: a ``named_modules`` method is read as a module).
METHODS = {
    "parameters": {"paddle": None, "mindspore": "{receiver}.trainable_params({args})"},
    "named_parameters": {"paddle": None,
                         "mindspore": "uo.porting.named_parameters({receiver}{comma_args})"},
    "named_modules": {"paddle": "{receiver}.named_sublayers({args_first}include_self=True)",
                      "mindspore": "{receiver}.cells_and_names({args})"},
    "modules": {"paddle": "{receiver}.sublayers({args_first}include_self=True)",
                "mindspore": "(cell for _, cell in {receiver}.cells_and_names({args}))"},
    "named_children": {"paddle": None, "mindspore": "{receiver}.name_cells().items()"},
    "children": {"paddle": None, "mindspore": "{receiver}.name_cells().values()"},
    "numel": {"paddle": "{receiver}.size", "mindspore": None},
}
#: keyword renames per method and target: torch's ``recurse`` is Paddle's
#: ``include_sublayers``; MindSpore's helper takes torch's keywords
KEYWORDS = {
    ("parameters", "paddle"): {"recurse": "include_sublayers"},
    ("named_parameters", "paddle"): {"recurse": "include_sublayers"},
    ("named_modules", "mindspore"): {"prefix": "name_prefix"},
}
#: methods whose arguments the target form cannot take (MindSpore's trainable_params has
#: a ``recurse`` of its own; children lists take none)
NO_ARGUMENTS = {("named_children", "mindspore"), ("children", "mindspore"),
                ("numel", "paddle"), ("modules", "mindspore")}

#: torch.nn classes a script names (in isinstance tests, tuples of module types) ->
#: target -> the target's class
CLASSES = {
    "torch.nn.Module": {"paddle": "paddle.nn.Layer", "mindspore": "mindspore.nn.Cell"},
    "torch.nn.Linear": {"paddle": "paddle.nn.Linear", "mindspore": "mindspore.nn.Dense"},
    "torch.nn.LayerNorm": {"paddle": "paddle.nn.LayerNorm",
                           "mindspore": "mindspore.nn.LayerNorm"},
    "torch.nn.Embedding": {"paddle": "paddle.nn.Embedding",
                           "mindspore": "mindspore.nn.Embedding"},
    "torch.nn.GroupNorm": {"paddle": "paddle.nn.GroupNorm",
                           "mindspore": "mindspore.nn.GroupNorm"},
    **{f"torch.nn.Conv{d}d": {"paddle": f"paddle.nn.Conv{d}D",
                              "mindspore": f"mindspore.nn.Conv{d}d"} for d in (1, 2, 3)},
    **{f"torch.nn.BatchNorm{d}d": {"paddle": f"paddle.nn.BatchNorm{d}D",
                                   "mindspore": f"mindspore.nn.BatchNorm{d}d"}
       for d in (1, 2, 3)},
    # the base classes torchvision's recipes test norm layers by (its set_weight_decay):
    # each framework's base of its BatchNorm*d and InstanceNorm*d classes
    "torch.nn.modules.batchnorm._BatchNorm": {
        "paddle": "paddle.nn.layer.norm._BatchNormBase",
        "mindspore": "mindspore.nn.layer.normalization._BatchNorm"},
    "torch.nn.modules.instancenorm._InstanceNorm": {
        "paddle": "paddle.nn.layer.norm._InstanceNormBase",
        "mindspore": "mindspore.nn.layer.normalization._InstanceNorm"},
    "torch.nn.LocalResponseNorm": {"paddle": "paddle.nn.LocalResponseNorm",
                                   "mindspore": "mindspore.nn.LRN"},
}
#: the real module paths of those classes (``torch.nn.modules.linear.Linear``)
CLASS_MODULES = ("torch.nn.modules.",)

#: optimizer state: torch's save/load functions
STATE = {"save": "torch.save", "load": "torch.load"}
#: target -> torch classes whose native class there keeps state that no state file maps
#: (Paddle's RAdam and NAdam derive ``rho`` / ``mu`` from the step in float32): a script
#: that saves or loads the optimizer's state builds them with ``path='own'``
STATE_NEEDS_OWN = {"paddle": ("torch.optim.RAdam", "torch.optim.NAdam")}

#: param_groups keys a script may write during training that Paddle's native classes read
#: only when built (the lr they take at every step): a script writing one builds that
#: optimizer with ``path='own'`` on Paddle
WRITTEN_HYPERPARAMETERS = ("weight_decay", "momentum", "betas", "eps", "dampening", "alpha",
                           "rho", "lr_decay", "nesterov", "amsgrad", "maximize")

#: optimizers of other torch libraries, which the port cannot map (their math is not a
#: preset's): every call into a library of optimizers only, and transformers' two
#: classes; a script calling one is marked (it would step torch tensors on the target)
OTHER_OPTIMIZER_MODULES = ("torch_optimizer.", "pytorch_optimizer.", "timm.optim.",
                           "bitsandbytes.optim.", "apex.optimizers.", "lion_pytorch.",
                           "came_pytorch.", "schedulefree.", "adan_pytorch.",
                           "deepspeed.ops.adam.", "deepspeed.ops.lamb.")
OTHER_OPTIMIZERS = {f"{module}.{name}" for module in ("transformers", "transformers.optimization")
                    for name in ("AdamW", "Adafactor")}


def other_library_optimizer(qualified_name: str) -> bool:
    """Whether ``qualified_name`` is an optimizer of another torch library (or a function
    of one that makes optimizers): :data:`OTHER_OPTIMIZER_MODULES`, :data:`OTHER_OPTIMIZERS`."""
    return qualified_name in OTHER_OPTIMIZERS or qualified_name.startswith(
        OTHER_OPTIMIZER_MODULES)


#: calls that only look at an optimizer class (its signature, a type test): left as
#: written, they build nothing
INSPECTIONS = ("inspect.signature", "builtins.isinstance", "builtins.issubclass")


def class_for(qualified_name: str, to: str) -> str | None:
    """The target's class for a ``torch.nn`` class named ``qualified_name`` (its public
    or real module path), None when the table has none."""
    if qualified_name in CLASSES:
        return CLASSES[qualified_name][to]
    if qualified_name.startswith(CLASS_MODULES):
        short = "torch.nn." + qualified_name.rpartition(".")[2]
        if short in CLASSES:
            return CLASSES[short][to]
    return None


def is_torch_nn_class(qualified_name: str) -> bool:
    """Whether ``qualified_name`` names a class of ``torch.nn`` (a module type a script
    may test parameters by), mapped or not: ``torch.nn.X`` with X capitalized, after any
    leading underscores (``torch.nn.modules.batchnorm._NormBase``)."""
    head, _, last = qualified_name.rpartition(".")
    return ((head == "torch.nn" or head.startswith("torch.nn.modules"))
            and last.lstrip("_")[:1].isupper())
