"""uo optimizers in ``paddle.jit.to_static`` training.

Two ways to compile Paddle training, both measured with Paddle 3.3.1:

* The model compiled (``paddle.jit.to_static(model, full_graph=True)``: a static
  program for the forward and its backward), ``loss.backward()`` and ``opt.step()`` in
  Python. The optimizer is outside the compiled code: any uo optimizer works.
* The whole step (forward, ``loss.backward()``, ``opt.step()``) under ``to_static``
  (SOT, the bytecode translator, ``full_graph=False``). SOT simulates the Python code
  of the functions the step calls. ``Tensor.backward`` is a graph break it cannot
  resume inside a closure, so it runs the step eagerly ("fallback to dygraph"), but
  first it simulates what it meets, and the spec code stops it with an error
  (``HasNoAttributeError: DataClassInstanceVariable ... has no attribute
  varies_per_step`` from inside ``Spec.at_step``).

:func:`run_eagerly_under_to_static` (called by every Paddle ``build``) adds
unified-opt's own source folders to the files SOT does not translate, as it does for
Paddle's own sources, so a uo optimizer's step (the own implementation and the hooks
around a native class) always runs eagerly, on the real tensors. In both ways the
numbers equal a dygraph run bit for bit (``tests/test_paddle_to_static.py``: CAME own,
Lamb native, AdamW with a cosine schedule and global-norm clipping). The registration
uses SOT's skip list (``paddle.jit.sot.opcode_translator.skip_files``); where a Paddle
version lacks it, ``build`` says so instead of letting a step fail inside SOT.

``full_graph=True`` on the whole step (the AST translator) cannot run
``loss.backward()`` for any optimizer. Static-graph mode (``paddle.enable_static()``)
is refused by ``build`` (:func:`check_dynamic_mode`).
"""

from __future__ import annotations

import os
import re

import unified_opt

_registered = False


def source_folders() -> list[str]:
    """unified-opt's folders whose code an optimizer step runs (the core, the backends)."""
    import unified_opt.backends as backends

    return sorted({os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                   for m in (unified_opt, backends)})


def run_eagerly_under_to_static() -> None:
    """Tell SOT not to translate unified-opt's code (once per process)."""
    global _registered
    if _registered:
        return
    try:
        from paddle.jit.sot.opcode_translator import skip_files
    except ImportError as error:   # a Paddle without SOT: nothing translates our code
        raise RuntimeError(f"unified-opt needs paddle.jit.sot's skip list to run inside "
                           f"paddle.jit.to_static; this Paddle has none ({error})") from error
    names = skip_files.skip_file_names
    names.update(source_folders())
    skip_files.skip_file_name_re = re.compile(f"^({'|'.join(map(re.escape, names))})")
    skip_files.setup_skip_files()
    _registered = True


def check_dynamic_mode(paddle) -> None:
    """Static-graph mode builds a Program, which uo's optimizers and hooks do not take
    part in: refused, naming what works instead."""
    if not paddle.in_dynamic_mode():
        raise ValueError("build: Paddle is in static-graph mode (paddle.enable_static()); "
                         "uo.build builds dynamic-graph optimizers. Train in dynamic mode, "
                         "and compile the training step with paddle.jit.to_static, where "
                         "the uo optimizer's step runs eagerly between the compiled parts")
