"""The API reference's pages, generated at each docs build (``docs/conf.py``) into
``docs/api/`` (git ignores it): an index by topic, and one page per public function and
class whose text is its docstring (autodoc), the algorithms' update rules included.

Written here rather than by autosummary's stub generator because several public names
are also module names (``uo.build`` the function and ``unified_opt.build`` the module,
likewise ``algorithms``, ``backends``, ``reference``, ``presets``), which autosummary
resolves to the module.

    python docs/api_pages.py OUT_DIR     # write the pages (what the build does)
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import unified_opt as uo
from unified_opt.files import write_pages

#: (title, introduction, public names); a name is ``uo.<name>`` unless dotted further
SECTIONS: list[tuple[str, str, list[str]]] = [
    ("Specs",
     "A spec is a frozen, keyword-only dataclass of hyperparameters with the update "
     "written once; every known divergence between frameworks is a knob.",
     ["Spec", "algorithms", "get", "spec_from_dict", "records.record", "records.Record",
      "records.Planted", "records.CaseSketch", "records.records"]),
    ("Algorithms",
     "One class per algorithm: its hyperparameters, the update rule and the differences "
     "between frameworks.",
     # every registered algorithm (its plug-ins' too: unified_opt.records), by name
     [uo.spec.spec_class(name).__name__ for name in uo.algorithms()]),
    ("Building an optimizer",
     "The framework's own optimizer object for a spec, and why that one.",
     ["build", "explain", "Decision", "backends", "native_scheduler", "plateau_scheduler",
      "skipped_steps", "exchange_stats", "optimizer_factory"]),
    ("The training loop",
     "Parameter groups as name rules, gradient clips, and the gradient pre-step every "
     "path runs.",
     ["Group", "ClipByGlobalNorm", "ClipByNorm", "ClipByValue", "clip_grad_norm_",
      "clip_grad_value_", "unified_opt.pre_step"]),
    ("Schedulers",
     "torch's schedulers (names, arguments, numbers) driving any optimizer ``uo.build`` "
     "returns through ``param_groups``, each built on ``uo.schedules``.",
     ["lr_scheduler"] + [f"lr_scheduler.{n}" for n in (
         "LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
         "ExponentialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "LinearLR",
         "ConstantLR", "PolynomialLR", "OneCycleLR", "CyclicLR", "SequentialLR",
         "ChainedScheduler", "ReduceLROnPlateau", "WarmupScheduler",
         "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
         "get_constant_schedule_with_warmup")]),
    ("Learning-rate schedules",
     "Schedules are specs too: ``s(step) -> lr`` for the 0-based optimizer step, passed "
     "as ``lr=``; ``uo.schedules.preset`` reads a framework's own scheduler.",
     [f"schedules.{n}" for n in (
         "Schedule", "preset", "presets", "refusal", "schedule_from_dict", "schedules",
         "Constant", "Step", "MultiStep", "Exponential", "NaturalExp", "InverseTime",
         "Polynomial", "Piecewise", "Linear", "Cosine", "CosineWarmRestarts", "Cyclic",
         "OneCycle", "Noam", "LinearWarmup", "Multiplicative", "Lambda", "Sequential",
         "Product", "PerEpoch", "ReduceOnPlateau", "WarmupLinear", "WarmupCosine",
         "WarmupConstant", "WarmupCosineToMin")]),
    ("Porting",
     "A framework's own optimizer read as an exact spec, a live optimizer read back, and "
     "optimizer state carried between frameworks.",
     ["preset", "presets", "mindspore_groups", "from_native", "save_state", "load_state",
      "resume", "convert_checkpoint", "diff", "porting", "porting.name_map",
      "porting.live.read_native"]),
    ("Devices",
     "Where each backend's paths were verified, and the warning a build on any other "
     "device gives.",
     ["UnverifiedDeviceWarning", "unified_opt.devices.VERIFIED"]),
    ("The reference and the conformance suite",
     "The numpy oracle, and the conformance check of any optimizer (the suite's command "
     "line: ``unified-opt conformance``, ``docs/conformance.md``).",
     ["reference", "Reference", "conformance", "conformance.check"]),
    ("Inside the signatures",
     "The types and modules the signatures and docstrings above name.",
     ["unified_opt.ops.Ops", "unified_opt.clipping", "unified_opt.exchange",
      "unified_opt.native.NativeClass", "unified_opt.native.Lowering",
      "unified_opt.native.Condition", "unified_opt.speed"]),
]

#: what a module page documents besides its docstring (those present)
MODULE_MEMBERS = {
    "unified_opt.clipping": ["Clip"],
    "unified_opt.exchange": ["Exchange", "SimulatedExchange", "CollectiveExchange", "LOCAL"],
    "unified_opt.speed": ["THRESHOLD", "SIZE_CLASSES", "Measured"],
}
#: classes a public signature returns, documented on the page of the function
RETURNED = {"conformance.check": ["unified_opt.conformance.checker.CheckResult"],
            "porting.live.read_native": ["unified_opt.porting.live.NativeReading"],
            "diff": ["unified_opt.diffs.Diff", "unified_opt.diffs.KnobDifference",
                     "unified_opt.diffs.Parting"],
            "schedules.ReduceOnPlateau": ["unified_opt.schedules.plateau.PlateauState"]}


#: data whose value is what the page documents (a table, not an object)
SHOW_VALUE = {"unified_opt.devices.VERIFIED"}

#: public names whose attribute on the package can be rebound: documented where defined
#: (importing the subpackage unified_opt.backends sets the package's attribute
#: ``backends`` to that subpackage, over the function)
HOMES = {"backends": "unified_opt.build.backends"}


def qualified(name: str) -> str:
    return name if name.startswith("unified_opt.") else f"unified_opt.{name}"


def display(name: str) -> str:
    return name.replace("unified_opt.", "") if name.startswith("unified_opt.") else f"uo.{name}"


def resolve(name: str) -> Any:
    """The object ``name`` stands for: attributes first (``uo.build`` is the function,
    not the module ``unified_opt.build``), the module only where no attribute is."""
    if name in HOMES:
        module, _, attribute = HOMES[name].rpartition(".")
        return getattr(importlib.import_module(module), attribute)
    parts = qualified(name).split(".")
    obj: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[:i + 1]))
    return obj


def exists(name: str) -> bool:
    """Whether ``name`` is there to document (a module another change adds may not be)."""
    full = qualified(name)
    try:
        resolve(name)
        return True
    except (ImportError, AttributeError):
        return importlib.util.find_spec(full) is not None if "." in full else False


def attribute_comment(name: str) -> str:
    """The ``#:`` comment above a module-level constant's assignment (its documentation:
    a constant's own ``__doc__`` is its type's)."""
    module, _, attribute = qualified(name).rpartition(".")
    source = inspect.getsource(importlib.import_module(module))
    found = re.search(rf"((?:^#:.*\n)+)^{re.escape(attribute)}\b", source, re.M)
    return " ".join(line[2:].strip() for line in found.group(1).splitlines()) if found else ""


def summary(obj: Any, name: str = "") -> str:
    """The docstring's first sentence as plain text (roles reduced to literals); a
    constant's ``#:`` comment."""
    if not (inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj)):
        first = attribute_comment(name) if name else ""
        return first[:1].upper() + first[1:] + ("." if first and first[-1] != "." else "")
    doc = inspect.getdoc(obj) if not inspect.ismodule(obj) else (obj.__doc__ or "")
    first = (doc or "").strip().split("\n\n")[0].replace("\n", " ")
    first = re.sub(r":[a-z:]+:`~?([^`<]*?)(?: <[^>]*>)?`", r"``\1``", first)
    literal = False
    for at, char in enumerate(first):
        if first.startswith("``", at) and (at == 0 or first[at - 1] != "`"):
            literal = not literal
        elif char == "." and not literal and (at + 1 == len(first) or first[at + 1] == " "):
            return first[:at + 1]
    return first if first.count("``") % 2 == 0 else ""


def page(name: str) -> str:
    """The page of one public name."""
    full, obj = HOMES.get(name, qualified(name)), resolve(name)
    title = display(name)
    lines = [title, "=" * len(title), ""]
    if inspect.ismodule(obj):
        lines += [f".. automodule:: {full}", ""]
        for member in MODULE_MEMBERS.get(full, []):
            value = getattr(obj, member, None)
            if inspect.isclass(value):
                lines += [f".. autoclass:: {full}.{member}", "   :members:",
                          "   :undoc-members:", ""]
            elif value is not None:
                lines += [f".. autodata:: {full}.{member}", ""]
        return "\n".join(lines)
    if inspect.isclass(obj):
        module = obj.__module__
        if module.startswith("unified_opt.algorithms."):
            # the algorithm's module is this page (its docstring is the class's)
            lines += [f".. py:module:: {module}", ""]
        lines += [f".. autoclass:: {full}", "   :members:", "   :undoc-members:",
                  "   :show-inheritance:", ""]
    elif callable(obj):
        lines += [f".. autofunction:: {full}", ""]
    elif name in SHOW_VALUE:
        lines += [f".. autodata:: {full}", ""]
    else:
        lines += [f".. autodata:: {full}", "   :no-value:", ""]
    for extra in RETURNED.get(name, []):
        if exists(extra):
            lines += [f".. autoclass:: {extra}", "   :members:", "   :undoc-members:", ""]
    return "\n".join(lines)


def index() -> str:
    title = "API reference"
    lines = [title, "=" * len(title), "",
             "Generated from the docstrings at each build: one page per public function "
             "and class. ``import unified_opt as uo``; the names and signatures are a "
             "stable contract, and the package ships its annotations (``py.typed``).", ""]
    names = []
    for heading, intro, members in SECTIONS:
        lines += [heading, "-" * len(heading), "", intro, ""]
        for name in members:
            if not exists(name):
                continue
            names.append(name)
            text = summary(resolve(name), name)
            lines.append(f"* :doc:`{display(name)} <{display(name)}>`" +
                         (f" -- {text}" if text else ""))
        lines.append("")
    lines += [".. toctree::", "   :hidden:", ""] + [f"   {display(n)}" for n in names]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """file name -> reStructuredText: the index and one page per name."""
    out = {"index.rst": index()}
    for _, _, members in SECTIONS:
        for name in members:
            if exists(name):
                out[f"{display(name)}.rst"] = page(name)
    return out


def write(out: Path) -> list[Path]:
    """Write the pages into ``out`` (a file only when its text changed); remove pages of
    names that are gone."""
    out.mkdir(parents=True, exist_ok=True)
    texts = pages()
    for stale in set(p.name for p in out.glob("*.rst")) - set(texts):
        (out / stale).unlink()
    return write_pages(out, texts)


if __name__ == "__main__":
    for path in write(Path(sys.argv[1])):
        print(f"wrote {path}")
