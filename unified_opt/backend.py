"""The backend contract: what every framework adapter provides, and the glue they share.

A backend (``unified_opt.backends.<framework>.BACKEND``) is a :class:`Backend`: its
native classes (:class:`unified_opt.native.NativeClass` descriptors, read without
importing the framework), the conditions it adds around each native class
(:meth:`Backend.around`), and the framework calls that build an optimizer. One method,
:meth:`Backend.decide`, makes every lowering decision from the spec, the path asked for,
the preference between exact paths (``prefer``: :mod:`unified_opt.speed`) and a
:class:`Context` (parameter groups, dtypes, device, size, zero-size parameters), so
``uo.build`` and ``uo.explain`` decide alike. :meth:`Backend.build` is the one build
sequence: check the parameters, decide, refuse what the chosen path cannot honour,
build, record.

Backends are found by name (:func:`load`), which keeps the numpy-only core free of any
import of the backend packages.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

from .native import Condition, Lowering, NativeClass, holds, when
from .spec import Spec
from .speed import Measured, check_prefer, choose
from .storage import LOW_PRECISION

PATHS = ("auto", "native", "own")
#: every backend, in the order reports list them
BACKENDS = ("torch", "paddle", "mindspore")


@dataclass(frozen=True)
class Context:
    """What a lowering decision may depend on besides the spec.

    ``plans``: one :class:`unified_opt.groups.ParameterPlan` per parameter (None when
    explaining a spec without parameters); ``dtypes``: the parameters' dtype names;
    ``device``: the framework's device ("CPU", "GPU", ...); ``zero_size``: the names of
    zero-size parameters; ``all_zero_size``: every parameter has zero size;
    ``options``: the implementation flags for the native class; ``total_steps``: the
    step limit a MindSpore build was given (``options={"total_steps": N}``)."""

    plans: tuple | None = None
    dtypes: tuple[str, ...] = ()
    device: str = "CPU"
    zero_size: tuple[str, ...] = ()
    all_zero_size: bool = False
    options: dict = field(default_factory=dict)
    total_steps: int | None = None
    #: parameters sharded across ranks (torch DTensors: FSDP2, tensor parallel)
    sharded: tuple[str, ...] = ()
    #: the process group a data-parallel spec exchanges over (torch:
    #: ``options={"process_group": pg}``; None: the default group)
    process_group: Any = None
    #: how the own implementation runs (``options={"compile": ...}``: "auto", True or
    #: False, torch also "inductor"; None: not given, "auto")
    own_compile: Any = None
    #: the build's total number of elements (None: no parameters, as ``uo.explain(spec)``)
    elements: int | None = None
    #: the parameters' shapes (``prefer="speed"`` reads the model of the set,
    #: :class:`unified_opt.speed.SetModel`; None: no parameters)
    shapes: tuple[tuple[int, ...], ...] | None = None


def framework_of(obj: Any) -> str | None:
    """'torch', 'paddle' or 'mindspore' when ``obj``'s class comes from that framework
    (read from the name of the module defining a class in its MRO: no import)."""
    for klass in type(obj).__mro__:
        root = (klass.__module__ or "").split(".")[0]
        if root in BACKENDS:
            return root
    return None


def _integral(dtype: Any) -> bool:
    """An integer or bool dtype (torch ``torch.int64``, Paddle ``paddle.int64``,
    MindSpore ``Int64``, numpy ``int64``): nothing an optimizer can step."""
    text = str(dtype).rsplit(".", 1)[-1].lower()
    return text == "bool" or text.startswith(("int", "uint"))


def _complex(dtype: Any) -> bool:
    """A complex dtype (torch ``torch.complex64``, Paddle ``paddle.complex64``,
    MindSpore ``Complex64``, numpy ``complex64``)."""
    return str(dtype).rsplit(".", 1)[-1].lower().startswith("complex")


def check_parameters(named: Sequence[tuple[str | None, Any]], caller: str = "build") -> str:
    """The framework of ``named`` ((name or None, parameter) pairs), after refusing what
    would run wrong without a word: an object of no framework (a Python float), parameters
    of several frameworks, one parameter given twice (it would be stepped twice per
    step), an integer or bool parameter (never updated), a complex one (the specs' math
    is real). Each error names the parameter
    (its name, else its position) and what it is."""
    def label(i: int, name: str | None) -> str:
        return f"parameter {name!r}" if name is not None else f"params[{i}]"

    frameworks: dict[str, int] = {}
    for i, (name, p) in enumerate(named):
        framework = framework_of(p)
        if framework is None:
            raise TypeError(f"{caller}: parameters must all come from one framework: "
                            f"{label(i, name)} is {p!r} of type {type(p).__name__}, not a "
                            "torch, Paddle or MindSpore parameter")
        frameworks.setdefault(framework, i)
    if len(frameworks) > 1:
        where = ", ".join(f"{f} ({label(i, named[i][0])})" for f, i in frameworks.items())
        raise TypeError(f"{caller}: parameters must all come from one framework, got {where}")
    seen: dict[int, int] = {}
    for i, (name, p) in enumerate(named):
        if id(p) in seen:
            first = seen[id(p)]
            raise ValueError(f"{caller}: {label(i, name)} is the same parameter as "
                             f"{label(first, named[first][0])}: given twice, it would be "
                             "stepped twice per step")
        seen[id(p)] = i
        dtype = getattr(p, "dtype", None)
        if dtype is not None and _integral(dtype):
            raise TypeError(f"{caller}: {label(i, name)} has dtype {dtype} (shape "
                            f"{tuple(getattr(p, 'shape', ()))}): an optimizer updates "
                            "floating-point parameters only, this one would never change")
        if dtype is not None and _complex(dtype):
            raise TypeError(f"{caller}: {label(i, name)} has dtype {dtype} (shape "
                            f"{tuple(getattr(p, 'shape', ()))}): the specs define updates of "
                            "real numbers (a norm, a square or a sign of a complex value "
                            "is another formula); keep it as a real tensor of pairs "
                            "(torch.view_as_real of its data) and view it as complex in the "
                            "model, which is how torch's own optimizers step it")
    return next(iter(frameworks))


def nonfinite_applies(text: str, spec: Spec) -> bool:
    """Whether a native class's non-finite departure applies to ``spec``: one written
    "with FLAG, ..." (Paddle's Adam: "with amsgrad, its max keeps ...") only where the
    spec sets that flag."""
    words = text.split(",", 1)[0].split()
    if len(words) == 2 and words[0] == "with" and words[1].isidentifier():
        return bool(getattr(spec, words[1], True))
    return True


#: ``options={"compile": ...}`` of the own implementation on every backend: "auto" (the
#: kernel VM, generated kernels for large parameters compiled in the background), True
#: (every program compiled before its first step), False (eagerly, framework operations)
COMPILE_MODES = ("auto", True, False)


def compile_option(options: dict, modes=COMPILE_MODES):
    """``options["compile"]`` taken out of ``options`` and checked; None when not given."""
    if "compile" not in options:
        return None
    value = options["compile"]
    if not isinstance(value, (bool, str)):
        raise TypeError(f"build: options compile must be a bool or a str, one of {modes}; "
                        f"got {value!r} of type {type(value).__name__}")
    if value not in modes:
        raise ValueError(f"build: options compile must be one of {modes}, got {value!r}")
    return options.pop("compile")


@dataclass(frozen=True)
class Decision:
    """What ``uo.build`` does for a spec on a backend, and why (``uo.explain``'s answer;
    ``str()`` is the text ``unified-opt explain`` prints).

    Args:
        backend: ``"torch"``, ``"paddle"`` or ``"mindspore"``.
        algorithm: the spec's registry name.
        path: ``"native"`` (the framework's class) or ``"own"`` (the spec's update).
        native: the native class's qualified name on the native path, else None.
        reason: why this path, in words.
        rejected: ``(native class, the conditions it does not meet)`` for each class
            that does not compute the spec exactly.
        lowering: how the spec's values map onto the native class's arguments.
        native_class: the native class's descriptor on the native path.
        own_class: the own path's optimizer class, on the own path.
        prefer: ``"speed"`` or ``"native"``, the preference the decision was made under.
        alternative: the exact path not taken where both were exact, else None.
        measured: the speed table's row the choice read, else None.
    """

    backend: str
    algorithm: str
    path: str                                  # "native" or "own"
    native: str | None                         # the native class on the native path
    reason: str
    rejected: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (native class, unmet conditions)
    lowering: Lowering | None = None
    native_class: NativeClass | None = None
    own_class: str | None = None
    #: the preference between exact paths the decision was made under
    prefer: str = "native"
    #: the exact path not taken where both were exact: the native class the own
    #: implementation replaced (``prefer="speed"``), or "own implementation" where a
    #: measured native class was kept; None where only one path was exact
    alternative: str | None = None
    #: the speed table's row the choice read (None: nothing measured, or not asked)
    measured: Measured | None = None

    def __str__(self) -> str:
        if self.path == "native":
            head = f"{self.backend}: {self.algorithm} -> native {self.native}"
        else:
            head = f"{self.backend}: {self.algorithm} -> own implementation ({self.own_class})"
        lines = [head, f"  why: {self.reason}"]
        if self.alternative is not None:
            lines.append(f"  alternative: {self.alternative}" + (
                f" ({self.measured.ratio:g}x: native {self.measured.native_ms:.3g} ms, own "
                f"{self.measured.own_ms:.3g} ms per step)" if self.measured else ""))
        for native, unmet in self.rejected:
            lines.append(f"  not {native}: needs " + "; ".join(unmet))
        return "\n".join(lines)


@dataclass
class BuildRecord:
    """What ``uo.build`` made: kept per optimizer for explain, schedulers and state."""

    spec: Spec
    decision: Decision
    names: list[str | None]
    params: list[Any]
    lr_scheduler: Any = None
    plans: list | None = None
    #: one bool per optimizer step call: True where ``skip_nonfinite`` skipped it
    skipped: list[bool] = dataclasses.field(default_factory=list)
    #: the ``uo.Group`` rules the build was given (a state file carries them)
    groups: tuple = ()
    #: the plans' group indices that come from group dicts (given to the build, or to
    #: ``add_param_group`` later); a state file carries them as rules
    #: (:func:`unified_opt.param_groups.saved_record`)
    dict_groups: tuple = ()


_RECORDS: "weakref.WeakKeyDictionary[Any, BuildRecord]" = weakref.WeakKeyDictionary()


def remember(optimizer: Any, record: BuildRecord) -> None:
    _RECORDS[optimizer] = record


def record_of(optimizer: Any) -> BuildRecord:
    try:
        return _RECORDS[optimizer]
    except (KeyError, TypeError):
        raise ValueError(f"{type(optimizer).__name__} object was not built by "
                         "unified_opt.build") from None


def installed() -> list[str]:
    """Backends whose framework is installed (found without importing it)."""
    return [b for b in BACKENDS if importlib.util.find_spec(b) is not None]


def load(name: str) -> "Backend":
    """The backend called ``name`` (imports its package, not its framework)."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return importlib.import_module(f"unified_opt.backends.{name}").BACKEND


def load_installed(name: str) -> "Backend":
    if importlib.util.find_spec(name) is None:
        raise ValueError(f"backend {name!r} is not installed (pip install "
                         f"'unified-opt[{name}]')")
    return load(name)


def _storage_around(context: Context) -> list[Condition]:
    """Every native row's condition on the parameters' dtypes: a bfloat16 or float16
    parameter's update computes in float32 and rounds what it keeps once
    (:mod:`unified_opt.storage`); what native classes do there varies (torch's fused CPU
    SGD on bfloat16 parameters lands 13 bfloat16 ulps off at its first step), and no row
    is verified for it."""
    low = sorted(set(context.dtypes) & set(LOW_PRECISION))
    if not low:
        return []
    return [when(f"float32 or float64 parameters (these are {', '.join(low)}: the spec "
                 "computes their update in float32 and rounds once, which no native class "
                 "is verified to do)", lambda s: False)]


def _check_trainers(spec: Spec, exchange) -> None:
    """A data-parallel spec's ``num_trainers`` (DGC's clip scale) against the ranks its
    own optimizer exchanges with (1 without an exchange): refused at the build, not at
    the first step."""
    trainers = getattr(spec, "num_trainers", None)
    world = exchange.world_size if exchange is not None else 1
    if trainers is not None and trainers != world:
        raise ValueError(f"build: {type(spec).__name__}(num_trainers={trainers}) but this "
                         f"optimizer exchanges over {world} rank(s); num_trainers must be "
                         f"the world size (or None where no local_grad_clip_norm is set)")


class Backend:
    """One framework's adapter (see the module docstring). Subclasses set ``name``,
    ``own_class`` and ``classes_module`` and implement the framework calls."""

    name = ""
    own_class = ""
    #: the module holding ``CLASSES``, the backend's descriptors (no framework import)
    classes_module = ""

    # -- the table ------------------------------------------------------------------
    @property
    def classes(self) -> tuple[NativeClass, ...]:
        return importlib.import_module(self.classes_module).CLASSES

    def rows(self, algorithm: str | None = None) -> list[tuple[NativeClass, Lowering]]:
        """(class, lowering) pairs in decision order, for one algorithm or all."""
        return [(cls, lowering) for cls in self.classes for lowering in cls.lowerings
                if algorithm is None or lowering.algorithm == algorithm]

    def native_class(self, qualified_name: str) -> NativeClass:
        for cls in self.classes:
            if cls.name == qualified_name:
                return cls
        raise KeyError(f"{self.name}: no descriptor for {qualified_name!r}")

    # -- deciding -------------------------------------------------------------------
    def around(self, cls: NativeClass, lowering: Lowering, spec: Spec,
               context: Context) -> Sequence[Condition]:
        """Conditions on what lies around the algorithm (pre-step, per-step
        hyperparameters, groups, parameters) under which ``cls`` still runs it exactly."""
        return ()

    def notes(self, decision: Decision, spec: Spec, context: Context) -> str:
        """Text added to a native decision's reason (what runs around the class)."""
        return ""

    def decide(self, spec: Spec, path: str = "auto", context: Context | None = None,
               prefer: str = "native") -> Decision:
        """The lowering of ``spec``: the first row whose conditions all hold (with
        :meth:`around`'s), else the own implementation. ``path="native"`` raises when
        no row holds; ``path="own"`` always takes the own implementation.

        ``prefer`` (``path="auto"`` only) chooses between the row and the own
        implementation where both are exact: "native" takes the row (the table of
        lowerings as it stands: the matrix, the conformance coverage); "speed" (what
        ``uo.build`` and ``uo.explain`` default to) the faster by the measured table
        (:func:`unified_opt.speed.choose`)."""
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        prefer = check_prefer(prefer, "decide")
        context = Context() if context is None else context
        rows = self.rows(spec.name)
        rejected = []
        for cls, lowering in rows:
            around = [*self.around(cls, lowering, spec, context), *_storage_around(context)]
            unmet = lowering.unmet(spec) + [c.text for c in around if not holds(c, spec)]
            if unmet:
                rejected.append((cls.name, tuple(unmet)))
                continue
            if path == "own":
                return Decision(self.name, spec.name, "own", None,
                                f"own implementation requested (native {cls.name} would be "
                                "exact)", tuple(rejected), own_class=self.own_class,
                                prefer=prefer, alternative=cls.name)
            choice = choose(self.name, spec.name, cls.name, context) \
                if path == "auto" and prefer == "speed" else None
            if choice is not None and choice.own:
                return Decision(self.name, spec.name, "own", None, choice.text,
                                tuple(rejected), own_class=self.own_class, prefer=prefer,
                                alternative=cls.name, measured=choice.measured)
            reason = f"{cls.name} computes exactly this spec"
            if lowering.note:
                reason += f" ({lowering.note})"
            if cls.nonfinite and nonfinite_applies(cls.nonfinite, spec):
                reason += f"; with a non-finite gradient it departs: {cls.nonfinite}"
            if choice is not None:
                reason += f"; {choice.text}"
            decision = Decision(self.name, spec.name, "native", cls.name, reason,
                                tuple(rejected), lowering, cls, self.own_class, prefer,
                                alternative="own implementation" if choice is not None
                                and choice.measured is not None else None,
                                measured=None if choice is None else choice.measured)
            extra = self.notes(decision, spec, context)
            return dataclasses.replace(decision, reason=f"{reason}; {extra}") if extra \
                else decision
        if path == "native":
            detail = "; ".join(f"{n} needs {', '.join(u)}" for n, u in rejected) or \
                f"{self.name} has no native class for {spec.name!r}"
            raise ValueError(f"path='native': no native {self.name} optimizer computes this "
                             f"spec exactly: {detail}")
        if path == "own":
            reason = "own implementation requested"
        elif rows:
            reason = "no native class computes this configuration exactly"
        else:
            reason = f"{self.name} has no native optimizer for {spec.name!r}"
        return Decision(self.name, spec.name, "own", None, reason, tuple(rejected),
                        own_class=self.own_class, prefer=prefer)

    # -- building (framework calls, in subclasses) -------------------------------------
    def context(self, spec: Spec, named: list, plans: list, options: dict) -> Context:
        """Check the parameters and options; the decision context of a build."""
        raise NotImplementedError

    def build_native(self, decision: Decision, spec: Spec, named: list, plans: list,
                     context: Context):
        """``(optimizer, lr_scheduler, skipped)`` on the native path."""
        raise NotImplementedError

    def build_own(self, decision: Decision, spec: Spec, named: list, plans: list,
                  context: Context):
        """``(optimizer, lr_scheduler, skipped)`` on the own path."""
        raise NotImplementedError

    def build(self, spec: Spec, named: list, *, path: str, options: dict, plans: list,
              prefer: str = "speed"):
        """The one build sequence: ``(optimizer, BuildRecord)``."""
        context = self.context(spec, named, plans, dict(options))
        context = dataclasses.replace(context, elements=total_elements(named),
                                      shapes=parameter_shapes(named))
        decision = self.decide(spec, path, context, prefer)
        if decision.path == "native" and context.own_compile is not None:
            raise ValueError(f"build: options compile={context.own_compile!r} is for the own "
                             f"implementation; this spec runs natively ({decision.native}), "
                             "whose implementation flags are the class's own")
        if decision.path == "own":
            if context.options:
                raise ValueError(f"build: options {sorted(context.options)} apply to native "
                                 f"classes; this spec runs the own implementation "
                                 f"({decision.reason})")
            optimizer, scheduler, skipped = self.build_own(decision, spec, named, plans,
                                                           context)
            _check_trainers(spec, getattr(optimizer, "exchange", None))
        else:
            optimizer, scheduler, skipped = self.build_native(decision, spec, named, plans,
                                                              context)
        record = BuildRecord(spec, decision, [n for n, _ in named], [p for _, p in named],
                             scheduler, list(plans), skipped)
        return optimizer, record

    def parameter_name(self, p) -> str | None:
        """The name rules see for a parameter passed without a name (None: none)."""
        return None

    def world_size(self) -> int:
        """How many ranks this process trains with (its framework's process group, or
        the launcher's environment where no group is initialized yet)."""
        return 1

    def native_state(self, record: BuildRecord, optimizer, p, spec: Spec) -> dict:
        """A native optimizer's state of parameter ``p`` under ``spec``'s state names."""
        raise NotImplementedError

    def plateau_scheduler(self, optimizer, rule, record: BuildRecord, monitor: str | None):
        """The framework's own plateau scheduler for ``optimizer`` computing ``rule``."""
        raise NotImplementedError


def parameter_shapes(named: Sequence[tuple[str | None, Any]]) -> tuple[tuple[int, ...], ...]:
    """Every parameter's shape, as ints (what ``prefer="speed"`` models a build by)."""
    return tuple(tuple(int(n) for n in tuple(getattr(p, "shape", ()))) for _, p in named)


def total_elements(named: Sequence[tuple[str | None, Any]]) -> int:
    """The number of elements of every parameter together (what ``prefer="speed"``
    sizes a build by)."""
    total = 0
    for _, p in named:
        count = 1
        for n in tuple(getattr(p, "shape", ())):
            count *= int(n)
        total += count
    return total


def launcher_ranks(variable: str) -> int:
    """The ranks a launcher's environment variable says this process is one of (1 where
    it is unset)."""
    import os

    value = os.environ.get(variable, "1")
    try:
        return max(int(value), 1)
    except ValueError:
        raise ValueError(f"the environment variable {variable}={value!r} is not a number "
                         "of ranks") from None
