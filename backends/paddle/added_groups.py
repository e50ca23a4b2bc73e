"""``add_param_group`` (and Paddle's ``_add_param_group``) on a native Paddle class after
``uo.build``.

The group dict is read as the own path reads it
(:func:`unified_opt.param_groups.added_group`: torch's absolute ``lr``, Paddle's
``learning_rate`` factor, any of the spec's hyperparameters; a scheduled spec lr
refused), the native class's conditions checked again over every parameter
(:func:`unified_opt.native_groups.check_still_exact`), and the parameters join the
class the way a build given all of them would lay them out (:func:`.layout.joining`):

* where that layout is a plain list, they are appended to it (Paddle's clip, a
  global norm included, then spans them);
* where it has Paddle parameter groups, a plain list becomes Paddle's first group
  (``_parameter_list`` a list of group dicts, as Paddle's constructor makes it), the
  parameters join the group whose keys they share or make a new one, through the
  class's own ``_add_param_group`` (which writes the lr factor and the regularizer onto
  the Parameters: :class:`.native._HeldAttributes` keeps them off between steps);
* a decay selector (AdamW's ``apply_decay_param_fun``, Lamb's
  ``exclude_from_weight_decay_fn``) is made again over every parameter and put where
  Paddle 3.3 reads it: the optimizer's attribute, its ``_default_dict`` and each group
  dict holding one (Lamb reads it per group);
* a coupled decay (SGD's, Adam's ``weight_decay``) that a build with every parameter
  would move into the groups stays the optimizer's, and the added parameters' groups
  carry their own (Paddle applies a group's as their regularizer);
* their accumulators are created at once, as the build creates the others.

Refused, a ValueError naming ``path='own'`` with nothing changed, where that is not
possible: the build's optimizer-level arguments or grouping would have to change,
Paddle's ``Momentum`` would need groups (its constructor turns each group's
``weight_decay`` into the ``regularization_method``/``regularization_coeff`` its kernel
reads, and a group added later is not turned: its decay would be the optimizer's), and
``use_multi_tensor=True`` (Paddle's multi-tensor kernels hold the groups' tensors made
at construction).
"""

from __future__ import annotations

import paddle
from paddle.utils import unique_name

from unified_opt.native import import_native

from .native import DECAY_SELECTORS, _HeldAttributes, subclass_with

#: classes whose constructor rewrites the groups it is given (see the module)
REWRITES_GROUPS = frozenset({"paddle.optimizer.Momentum"})

#: a decay selector's keyword -> the attribute Paddle 3.3 keeps it in (adamw.py,
#: lamb.py, incubate/optimizer/lars_momentum.py)
SELECTOR_ATTRIBUTES = {"apply_decay_param_fun": "_apply_decay_param_fun",
                       "exclude_from_weight_decay_fn": "_exclude_from_weight_decay_fn",
                       "exclude_from_weight_decay": "_exclude_from_weight_decay"}


def _dtypes(params) -> tuple[str, ...]:
    return tuple(sorted({str(p.dtype).removeprefix("paddle.") for p in params}))


def add_native_group(optimizer, param_group) -> None:
    """``optimizer.add_param_group(param_group)`` for a native class ``uo.build`` made
    (see the module); installed on the optimizer as ``add_param_group`` and
    ``_add_param_group``."""
    from unified_opt.backend import load, record_of
    from unified_opt.native_groups import check_still_exact, kept_on_failure, one_plan
    from unified_opt.param_groups import added_group

    from .layout import joining

    owner = type(optimizer).__name__
    caller = f"{owner}.add_param_group"
    record = record_of(optimizer)
    cls_info, lowering = record.decision.native_class, record.decision.lowering
    own = "build the own path, which takes any group: uo.build(spec, params, path='own')"
    if getattr(optimizer, "_use_multi_tensor", False):
        raise ValueError(f"{caller}: use_multi_tensor=True: Paddle's multi-tensor kernels "
                         f"hold the tensors of the groups {cls_info.name} was built with; "
                         + own)
    first = len(record.params)
    with kept_on_failure(record):
        _, params, plans = added_group(record, param_group, owner, "paddle",
                                       lambda p: p.name,
                                       exchanges=bool(getattr(record.spec, "data_parallel",
                                                              False)))
        one_plan(plans, caller)
        check_still_exact(load("paddle"), record, caller)
        join = joining(cls_info, lowering, record.spec, record.plans, first,
                       _dtypes(record.params[:first]), _dtypes(record.params))
        if isinstance(join, str):
            raise ValueError(f"{caller}: {cls_info.name} cannot take this group in place: "
                             f"it would need {join}; " + own)
        if join.layout.groups is not None and cls_info.name in REWRITES_GROUPS:
            raise ValueError(f"{caller}: these values need a Paddle parameter group, and "
                             f"{cls_info.name}'s constructor turns each group's weight_decay "
                             "into what its kernel reads, which a group added later misses "
                             "(its decay would be the optimizer's); " + own)
        selector = _selector(cls_info, join.layout, record.params)
        _join(optimizer, join, record.params, selector, cls_info)
    surface = optimizer._uo_surface
    surface.add(plans, params, float(optimizer.get_lr()), first)
    optimizer._uo_names.update({p.name: plan.name for p, plan in zip(params, plans)
                                if plan.name is not None})


def _selector(cls_info, layout, params):
    """The decay selector over every parameter (None: the layout has none). Made before
    anything changes: LARS's refuses a name holding an excluded one."""
    if layout.decayed is None:
        return None
    chosen = set(layout.decayed)
    return DECAY_SELECTORS[cls_info.decay_selector](
        params, [params[i] for i in sorted(chosen)],
        [p for i, p in enumerate(params) if i not in chosen])


def _join(optimizer, join, params, selector, cls_info) -> None:
    layout = join.layout
    added = params[join.first:]
    if layout.holds_attributes and not isinstance(optimizer, _HeldAttributes):
        # the build needed no attributes held; the same class with the mixin that
        # holds them (one subclass per combination, still an instance of the native one)
        base = import_native(cls_info.name)
        mixins = tuple(m for m in type(optimizer).__bases__ if m is not base)
        optimizer.__class__ = subclass_with(base, (*mixins, _HeldAttributes),
                                            cls_info.nonfinite)
    if layout.groups is None:
        optimizer._parameter_list.extend(added)
        if optimizer._param_groups is not optimizer._parameter_list:
            optimizer._param_groups.extend(added)
    else:
        _join_groups(optimizer, join, params)
    for i in layout.unclipped:
        if i >= join.first:
            optimizer._hold(params[i], need_clip=False)
    if selector is not None:
        keyword = cls_info.decay_selector
        setattr(optimizer, SELECTOR_ATTRIBUTES[keyword], selector)
        holders = [optimizer._default_dict, *(g for g in optimizer._param_groups
                                              if isinstance(g, dict))]
        for holder in holders:
            if keyword in holder:
                holder[keyword] = selector
    with unique_name.guard():       # accumulator names as the build makes them
        block = paddle.static.default_main_program().global_block()
        optimizer._create_accumulators(block, [p for p in added if not p.stop_gradient])


def _join_groups(optimizer, join, params) -> None:
    """The added parameters into Paddle's groups (see the module)."""
    class_add = type(optimizer)._add_param_group      # the class's: the instance's is ours

    def add_group(optimizer, group: dict) -> None:
        # Paddle's base class reads every group's 'weight_decay' (its regularizer, in
        # _add_param_group) and 'grad_clip' (in step), filled from the class's
        # _default_dict; Lamb's holds neither (a group added after its build raised
        # KeyError, then called a list). The group takes what the base class gave the
        # groups its constructor made: the regularizer and clip the class was built with.
        constructed = {"weight_decay": optimizer.regularization,
                       "grad_clip": optimizer._grad_clip}
        for key, value in constructed.items():
            if key not in group and key not in optimizer._default_dict:
                group[key] = value
        class_add(optimizer, group)
    if join.converts:
        built = list(optimizer._parameter_list)
        optimizer._param_groups = []
        optimizer._parameter_list = []
    for joins, indices, keys in join.groups:
        members = [params[i] for i in indices]
        if join.converts and joins == 0:
            group = {"params": built + members, **keys}
            optimizer._parameter_list.append(group)
            add_group(optimizer, dict(group))
        elif joins is None:
            add_group(optimizer, {"params": members, **keys})
        elif members:
            # Paddle's _add_param_group writes the group's attributes onto the members;
            # its group dict is then dropped and they join the group
            existing = optimizer._param_groups[joins]
            add_group(optimizer, {**{k: v for k, v in existing.items() if k != "params"},
                                  "params": members})
            optimizer._param_groups.pop()
            existing["params"].extend(members)
