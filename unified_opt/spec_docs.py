"""The ``Args:`` and ``Example:`` sections of every algorithm spec's docstring.

Each spec's docstring (its module's: the update in LaTeX and the differences between
frameworks) describes in its own ``Args:`` section the knobs whose meaning is its own.
The fields many specs share (``lr``, ``betas``, ``weight_decay``, ``no_decay_names``,
the gradient pre-step fields of every spec, ...) are described once here, in
:data:`SHARED_ARGS`, and :func:`document` adds them to that section in field order, so
``help(uo.AdamW)`` and the API reference list every field with its allowed values and
meaning. A spec's own entry wins over a shared one of the same name. :func:`document`
also adds an ``Example:`` section (a doctest run by tests/test_api_reference.py) where the
docstring has none.
"""

from __future__ import annotations

import dataclasses
import re

#: field -> its description (Google style: continuation lines indented by 4 more)
SHARED_ARGS: dict[str, str] = {
    "lr": "the learning rate, a float >= 0 or a ``uo.schedules`` schedule "
          "(``s(step) -> lr`` for the 0-based optimizer step).",
    "betas": "the moments' decay rates ``(beta1, beta2)``, each in [0, 1); a list or "
             "a tuple.",
    "eps": "added to the denominator for numerical stability, >= 0; where it is added "
           "is ``eps_placement`` where the spec has that knob.",
    "weight_decay": "the decay coefficient lambda, >= 0 (a float, or a ``uo.schedules`` "
                    "schedule: a decay that changes per step). In this spec it is L2 "
                    "decay added to the gradient (``g + lambda * theta``) unless the "
                    "update above says otherwise.",
    "amsgrad": "``True``: divide by the running maximum of the second moment "
               "(AMSGrad), ``False``: by the second moment itself.",
    "maximize": "``True``: ascend (the gradient is negated first), ``False``: descend.",
    # the schedule-free average (unified_opt.algorithms._schedule_free)
    "warmup_steps": "an int >= 0: the lr rises linearly over the first warmup_steps "
                    "steps (0: no warm-up).",
    "r": "the polynomial weighting r >= 0 of the average: step t weighs t**r.",
    "weight_lr_power": "the power p >= 0: the average weights each step by the running "
                       "maximum of the lr to this power.",
    "eps_placement": "where eps enters the denominator: ``'outside'`` (added to "
                     "sqrt of the bias-corrected second moment: torch, Paddle), "
                     "``'eps_hat'`` (added before the bias correction, the TF/Keras and "
                     "MindSpore form: a larger effective eps in early steps) or "
                     "``'inside'`` (under the square root).",
    "bias_correction": "``True``: divide the moments by ``1 - beta**t``; ``False``: "
                       "no correction (``mindspore.nn.AdamWeightDecay``).",
    "nesterov": "``True``: the Nesterov form of the momentum step (see the update); "
                "``False``: plain momentum.",
    "no_decay_names": "shell-style patterns over whole parameter names (``'*.bias'``); "
                      "a parameter whose name matches one gets no weight decay. Empty: "
                      "every parameter is decayed. A pattern that matches no parameter "
                      "is an error at build.",
    "momentum": "the momentum factor mu, in [0, 1); 0 is no momentum buffer.",
    "dampening": "the dampening d of the momentum buffer (``mu * b + (1 - d) * g``), "
                 "in [0, 1].",
    "lr_placement": "where the lr enters the momentum step: ``'outside'`` (the buffer "
                    "holds gradients, the lr scales the step: torch, Paddle Momentum) or "
                    "``'inside'`` (the buffer holds lr-scaled steps: Keras, Paddle "
                    "LARS). They agree while the lr is constant.",
    "momentum_init": "the first momentum step: ``'grad'`` (the buffer starts as the "
                     "first gradient: torch SGD) or ``'zeros'`` (it starts at 0 and the "
                     "first step applies the usual rule: Paddle Momentum).",
    "decoupled_weight_decay": "``True``: the decay multiplies the parameter by "
                              "``1 - lr * weight_decay`` before the update (torch's "
                              "``decoupled_weight_decay``, the AdamW form); ``False``: "
                              "L2 decay in the gradient.",
    "clip_threshold": "the update clipping threshold d, > 0: the update is divided by "
                      "``max(1, RMS(update) / d)``.",
    "relative_step": "``True``: the step size is ``min(lr, 1/sqrt(t))`` (the lr a cap); "
                     "``False``: the lr itself.",
    "warmup_init": "``True`` (with ``relative_step``): the relative step grows as "
                   "``min(lr * t, 1/sqrt(t))``; ``False``: ``min(lr, 1/sqrt(t))``.",
    "scale_parameter": "``True``: the step size is multiplied by the parameter's RMS "
                       "(floored at the spec's eps floor); ``False``: it is not.",
    "always_adapt": "``True``: the trust ratio applies to every parameter; ``False``: "
                    "only where the weight decay is non-zero (the paper's rule).",
    "grad_clip": "a gradient clip applied before the update: ``None`` (none), "
                 "``uo.ClipByGlobalNorm`` (torch's ``clip_grad_norm_``), "
                 "``uo.ClipByNorm`` or ``uo.ClipByValue``.",
    "loss_scale": "a static loss scale > 0: the gradients arrive multiplied by it and "
                  "are divided by it before the update; 1.0 is none.",
    "skip_nonfinite": "``True``: a step whose unscaled gradients hold inf or NaN is "
                      "skipped (nothing changes; ``uo.skipped_steps(opt)`` counts them); "
                      "``False``: it is taken.",
    "grad_centralization": "``True``: each gradient of two or more dimensions has its "
                           "mean over all axes but the first subtracted first "
                           "(gradient centralization); ``False``: not.",
    "state_dtype": "the dtype the state is kept in: ``None`` (the parameter's, as every "
                   "framework does), ``'float32'`` or ``'bfloat16'`` (rounded to it after "
                   "every update; builds the own update, no native class does this).",
}

_ENTRY = re.compile(r"^    (\w+)\b[^\n:]*:", re.M)


def _section(doc: str, title: str) -> tuple[int, int] | None:
    """The span of ``title:`` (a Google section at the docstring's left margin) and its
    indented lines, or None."""
    found = re.search(rf"^{title}:[ \t]*\n", doc, re.M)
    if found is None:
        return None
    end = found.end()
    for line in doc[found.end():].splitlines(keepends=True):
        if line.strip() and not line.startswith(" "):
            break
        end += len(line)
    return found.start(), end


def _entry(name: str, text: str) -> str:
    """One ``Args:`` entry, wrapped at 88 columns."""
    words, lines, line = text.split(), [], f"    {name}:"
    for word in words:
        if len(line) + 1 + len(word) > 88:
            lines.append(line)
            line = "        " + word
        else:
            line += " " + word
    return "\n".join(lines + [line]) + "\n"


def example(cls: type) -> str:
    """A doctest: the spec built, the numpy oracle stepped once on a small matrix."""
    return ("Example:\n"
            "    >>> import numpy as np\n"
            "    >>> import unified_opt as uo\n"
            f"    >>> spec = uo.{cls.__name__}(lr=0.01)\n"
            f"    >>> uo.get({cls.name!r}, lr=0.01) == spec\n"  # type: ignore[attr-defined]
            "    True\n"
            "    >>> ref = uo.reference(spec, {\"w\": np.ones((4, 3))})\n"
            "    >>> ref.step({\"w\": np.full((4, 3), 0.5)})   # returns the lr it used\n"
            "    0.01\n"
            "    >>> bool((ref.params[\"w\"] != 1.0).all())\n"
            "    True\n")


def document(cls: type) -> str:
    """``cls``'s docstring with every init field in its ``Args:`` section (the spec's
    own entries, then the shared ones for the fields it does not describe, in field
    order: the algorithm's fields first, the pre-step fields every spec has last) and an
    ``Example:`` section."""
    doc = cls.__doc__ or ""
    span = _section(doc, "Args")
    own: dict[str, str] = {}
    if span is not None:
        body = doc[span[0]:span[1]].split("\n", 1)[1]
        starts = [(m.group(1), m.start()) for m in _ENTRY.finditer(body)]
        for (name, start), (_, end) in zip(starts, starts[1:] + [("", len(body))]):
            own[name] = body[start:end].rstrip() + "\n"
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    common = [name for name in fields if name in ("grad_clip", "loss_scale",
                                                  "skip_nonfinite", "grad_centralization",
                                                  "state_dtype")]
    ordered = [name for name in fields if name not in common] + common
    entries = [own[name] if name in own else _entry(name, SHARED_ARGS[name])
               for name in ordered if name in own or name in SHARED_ARGS]
    section = "Args:\n" + "".join(entries)
    if span is None:
        marker = re.search(r"^Differences between frameworks\n-+\n", doc, re.M)
        at = marker.start() if marker else len(doc.rstrip()) + 1
        doc = doc[:at].rstrip() + "\n\n" + section + "\n" + doc[at:]
    else:
        doc = doc[:span[0]] + section + doc[span[1]:]
    if _section(doc, "Example") is None:
        doc = doc.rstrip() + "\n\n" + example(cls)
    return doc
