"""One porting page per framework pair, generated at each docs build (``docs/conf.py``)
into ``docs/pairs/`` (git ignores it) from the native-class descriptors
(``backends/<framework>/classes``) and the backends' decisions, as the compatibility
matrix is: reading them imports no framework, so the pages are the same wherever they
are built.

    python docs/porting_pairs.py OUT_DIR     # write the pages (what the build does)
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import unified_opt as uo
from unified_opt.backend import BACKENDS, load
from unified_opt.files import write_pages
from unified_opt.native import REQUIRED_ARGUMENTS

PAIRS = (("torch", "paddle"), ("torch", "mindspore"), ("paddle", "mindspore"))
NAMES = {"torch": "PyTorch", "paddle": "PaddlePaddle", "mindspore": "MindSpore"}

#: the training loop, framework by framework (what `unified-opt port` leaves to the user)
LOOP = {
    "parameters": {"torch": "`model.parameters()` (or `model`)",
                   "paddle": "`model.parameters()` (or `model`)",
                   "mindspore": "`model.trainable_params()` (or `model`)"},
    "one step": {"torch": "`loss.backward(); optimizer.step(); optimizer.zero_grad()`",
                 "paddle": "`loss.backward(); optimizer.step(); optimizer.clear_grad()`",
                 "mindspore": "`loss, grads = ms.value_and_grad(f, None, "
                              "optimizer.parameters)(x, y); optimizer(grads)`"},
    "lr schedule": {"torch": "`scheduler.step()` after `optimizer.step()` "
                             "(`uo.native_scheduler(optimizer)` is the one `uo.build` made)",
                    "paddle": "`scheduler.step()` after `optimizer.step()` "
                              "(`uo.native_scheduler(optimizer)`)",
                    "mindspore": "the optimizer steps its lr itself: no scheduler to step "
                                 "(`uo.native_scheduler(optimizer)` is `None`)"},
    "Linear weight": {"torch": "`nn.Linear`: (out, in)", "paddle": "`nn.Linear`: (in, out)",
                      "mindspore": "`nn.Dense`: (out, in)"},
    "weight decay by default": {
        "torch": "every parameter", "paddle": "every parameter",
        "mindspore": "`mindspore.nn` optimizers spare names containing `beta` or `gamma` "
                     "(the spec's `no_decay_names`); `experimental.optim` decays all"},
}


def _descriptors(backend: str) -> list[Any]:
    return [cls for cls in load(backend).classes if not getattr(cls, "refused", None)]


def _preset(descriptor: Any) -> uo.Spec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # a preset's warning about its CPU kernel
        return uo.preset(descriptor.name, **descriptor.example_arguments())


def _value(value: Any) -> str:
    text = repr(value.to_dict() if hasattr(value, "to_dict") else value)
    return text.replace("|", "\\|")


def _differences(a: uo.Spec, b: uo.Spec) -> list[str]:
    """The knobs whose values differ between two specs of one algorithm (canonical forms:
    a knob that cannot change the numbers is not a difference)."""
    left, right = a.canonical().hyperparameters(), b.canonical().hyperparameters()
    return [f"`{k}` {_value(left[k])} vs {_value(right[k])}" for k in left
            if left[k] != right.get(k)]


def _decision(spec: uo.Spec, backend: str) -> str:
    """The first row of ``backend``'s lowering table whose conditions hold for ``spec``
    (what the compatibility matrix reads; the rows alone import no framework)."""
    for cls, lowering in load(backend).rows(spec.name):
        if not getattr(cls, "not_lowered", None) and not lowering.unmet(spec):
            return f"native `{cls.name}`"
    return "own implementation (no native class computes it exactly)"


def _direction(source: str, target: str) -> list[str]:
    targets = [(d, _preset(d)) for d in _descriptors(target)]
    lines = [f"## {NAMES[source]} to {NAMES[target]}", "",
             f"Each {NAMES[source]} optimizer class with its defaults, read as a spec "
             f"(`uo.preset`), the {NAMES[target]} class that computes that spec exactly "
             "(what `uo.build` takes unless the measured speed table prefers the own "
             "implementation: `uo.explain` says which), and "
             f"how {NAMES[target]}'s own classes of the same algorithm differ from it "
             "with *their* defaults (picking one of those by hand ports these knobs "
             "wrongly; `unified-opt diff` says whether that changes the numbers).", "",
             f"| {NAMES[source]} class | spec | exact on {NAMES[target]} | "
             f"{NAMES[target]} classes of the algorithm: knobs that differ |",
             "|---|---|---|---|"]
    for descriptor in _descriptors(source):
        spec = _preset(descriptor)
        same = [(d, s) for d, s in targets if s.name == spec.name]
        others = "<br>".join(
            f"`{d.name}`: " + ("; ".join(_differences(spec, s)) or "none")
            for d, s in same) or "(none of this algorithm)"
        lines.append(f"| `{descriptor.name}` | `{spec.name}` | {_decision(spec, target)} | "
                     f"{others} |")
    return lines + [""]


def page(a: str, b: str) -> str:
    lines = [f"# Porting between {NAMES[a]} and {NAMES[b]}", "",
             "Generated from the native-class descriptors and the backends' decisions at "
             "each docs build (`docs/porting_pairs.py`); the steps of a port are in "
             "[Porting a run between frameworks](../porting.md).", "",
             "```console",
             f"$ unified-opt port train.py --to {b}          # rewrite the optimizer calls",
             f'$ unified-opt diff "<{a} class>(...)" "<{b} class>(...)"   # same numbers?',
             "```", "",
             "and in the scripts: `uo.save_state(optimizer, \"run.safetensors\")` in the "
             f"{NAMES[a]} run, `uo.resume(\"run.safetensors\", model)` in the {NAMES[b]} "
             "run (or the other way round).", "",
             "## The training loop", "",
             f"| | {NAMES[a]} | {NAMES[b]} |", "|---|---|---|"]
    for what, per in LOOP.items():
        lines.append(f"| {what} | {per[a]} | {per[b]} |")
    if (LOOP["Linear weight"][a].split(": ")[1] != LOOP["Linear weight"][b].split(": ")[1]):
        lines += ["", "The Linear weights (and their optimizer state) are transposed "
                  "between the two: `uo.resume(path, model, transform={name: np.transpose "
                  "for name in linear_weights})`."]
    lines += ["", "Required arguments of a class are given the matrix's values: "
              + ", ".join(f"`{k}={v}`" for k, v in REQUIRED_ARGUMENTS.items())
              + ". Schedulers: [the compatibility matrix]"
              "(../compatibility.md#learning-rate-schedulers).", ""]
    return "\n".join(lines + _direction(a, b) + _direction(b, a))


def pages() -> dict[str, str]:
    """file name -> Markdown, one page per framework pair."""
    assert all(x in BACKENDS for pair in PAIRS for x in pair)
    return {f"{a}-{b}.md": page(a, b) for a, b in PAIRS}


def write(out: Path) -> list[Path]:
    """Write the pages into ``out`` (a file only when its text changed, so that an
    incremental build rereads nothing else)."""
    return write_pages(out, pages())


if __name__ == "__main__":
    for path in write(Path(sys.argv[1])):
        print(f"wrote {path}")
