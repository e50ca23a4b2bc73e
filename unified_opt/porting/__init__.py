"""Porting a live run between frameworks.

* :mod:`.live`: ``uo.from_native(optimizer, lr_scheduler=None)`` reads a native optimizer
  (and its scheduler) that a script already built into a spec and group rules;
* :mod:`.state`: ``uo.save_state`` / ``uo.load_state`` / ``uo.resume``: optimizer state
  under the spec's own names in one safetensors file, restored on any backend;
* ``uo.diff(spec_a, spec_b)`` (:mod:`unified_opt.conformance.spec_diff`, as it runs the
  references under the suite's rule): do two configurations compute the same numbers,
  and if not, which knobs differ;
* :mod:`.script`: ``unified-opt port SCRIPT --to FRAMEWORK`` rewrites a script's
  optimizer and scheduler constructions;
* :mod:`.mapper` (with :mod:`.api_map`'s tables): ``port`` of a torch script, which keeps
  the script's code and maps only the framework calls; :mod:`.runtime`: what a ported
  script calls (``uo.porting.named_parameters``, ``check_clip_in_step``,
  ``torch_signature``);
* :mod:`.names`: ``uo.porting.name_map(source_framework, target_model)`` and the weight
  layout of each module type, which ``resume`` and ``load_state`` use across frameworks;
  ``uo.porting.map_rules(spec, groups, source_framework, model)`` renames rules read on
  one framework's model onto another's.

Like the rest of the core, nothing here imports a framework at import time.
"""

from .names import map_rules, name_map
from .runtime import check_clip_in_step, named_parameters, torch_signature

__all__ = ["check_clip_in_step", "map_rules", "name_map", "named_parameters", "torch_signature"]
