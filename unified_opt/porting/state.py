"""Portable optimizer state: ``uo.save_state``, ``uo.load_state`` and ``uo.resume``.

One safetensors file holds a run's optimizer, readable on any backend:

* tensors ``state/<parameter name>/<state name>``: every state array under the spec's
  own state names (``exp_avg``, ``exp_avg_sq``, ...; those ``spec.init`` makes for the
  parameter's shape), and ``step/<parameter name>`` (int64 [1]): the steps that
  parameter took;
* metadata (strings): ``format`` (:data:`FORMAT`), ``spec`` (``spec.to_dict()`` as JSON),
  ``groups`` (the ``uo.Group`` rules as JSON), ``names`` (the parameter names in build
  order), ``shapes``, ``steps`` (optimizer steps taken), ``position`` (the step the lr
  schedule stands at, empty without one), ``framework`` (where it was written), for a
  data-parallel spec ``rank`` and ``world_size`` (its residuals are that rank's: it
  loads on that rank only), ``group_values`` (parameter name -> the live ``lr`` of the
  param group holding it, the spec hyperparameters written into that group after the
  build, such as a cycled ``betas``, and its scheduler bookkeeping numbers, such as
  ``initial_lr``: :mod:`.saved_groups`; absent from older files, which load as before),
  and ``sha256``: a digest over all of the above, so truncation or flipped bytes anywhere
  are an error, not different numbers.

Each array keeps its storage dtype (bfloat16 as safetensors' ``BF16``, held in numpy as
:data:`BFLOAT16` bits). The file is safetensors' layout (an 8-byte header length, a
JSON header, the raw little-endian arrays), readable by the ``safetensors`` package: no
code runs on load, no pickle.

How it is written and read: ``save_state`` (and ``convert_checkpoint``)
writes through :func:`unified_opt.files.atomic_writer` (a temporary file in the same
folder, fsync, ``os.replace``, folder fsync), so a process killed at any moment, a full
disk or a file size limit leaves the old file whole (a failed write is an OSError
naming the file). Both directions stream: the digest is fed one array at a time and
each array is written from its own memory, and each array is read from its byte range
straight into the array returned; every backend hands over read-only views of its CPU
state tensors' memory (torch's tensors, Paddle's through DLPack, MindSpore's
``asnumpy``), and torch and MindSpore take the loaded arrays as their state (Paddle
copies each into its accumulator). The peak memory beyond the state the
optimizer holds (saving) or the arrays returned (loading) is the JSON header, not a
multiple of the state: ``benchmarks/results/state_memory.md`` measures it against the
target of 0.25 x the state's size. ``load_state`` checks everything (digest, format, spec
and groups equal to the target's, the same parameter names, every state array's name,
shape and dtype) before it writes anything: the optimizer is either fully loaded or
untouched. After the state is written, each group's recorded lr (where it differs from
the group's lr now, over a constant spec lr) is written into ``param_groups[g]["lr"]``
as a user's write, so is each recorded hyperparameter (``param_groups[g]["betas"]``;
a target that cannot take it, a Paddle native or MindSpore ``nn`` class, is refused before
anything is written), and its bookkeeping keys set; load a scheduler's own
``state_dict`` after it, as in torch.

Where the pieces are: :mod:`.snapshot` (what a state holds), :mod:`.state_encoding`
(its metadata strings and tensors, and the digest), :mod:`.state_file` (the file),
:mod:`.state_across` (another framework's names and layouts), :mod:`.state_dict` (the same
metadata and tensors as a dict of the framework's tensors: ``opt.state_dict()``). Here:
:func:`snapshot_of` (what ``save_state`` writes) and :func:`load_snapshot` (what
``load_state`` does with what it read).

Which optimizers: any made by ``uo.build``, on the own path or a native one, on every
backend; for saving, also a native optimizer built by hand that ``uo.from_native``
reads (with its ``lr_scheduler``; ``names`` names its parameters). A native class's
state is mapped through its descriptor's ``state`` map, and its step count is read
from an exact source (the class's own counter, Paddle's beta powers, uo's count or the
lr scheduler's position); a class whose count or state cannot be read that way is
refused by name (each backend's ``state`` module says which). ``convert_checkpoint``
turns a framework's own checkpoint file into such a state file.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..backend import BACKENDS, BuildRecord, record_of
from .saved_groups import check_group_values, group_values_of, saved_record, set_group_values

# the names this module has always offered (the backends' state modules, tests and
# benchmarks/state_memory.py read them here; the benchmark replaces _write, read_state
# and _backend_state here, which save_state and load_state look up in this module)
from .snapshot import (  # noqa: F401
    BFLOAT16,
    FILE_DTYPES,
    Snapshot,
    bfloat16_bits,
    changed_outside,
    dtype_name,
    initial_state,
    refuse_unnamed,
    spec_differences,
    state_layout,
    storage_dtype,
)
from .state_across import Transform, across, model_of, transformer
from .state_encoding import FORMAT, _digest, decoded, encoded  # noqa: F401
from .state_file import CALLER, _read_file, _write, read_state  # noqa: F401

#: a file path as the functions below take it
FilePath = str | os.PathLike


def _backend_state(framework: str):
    return importlib.import_module(f"unified_opt.backends.{framework}.state")


def _framework(optimizer: Any, caller: str = "save_state") -> str:
    root = type(optimizer).__module__.partition(".")[0]
    for framework in BACKENDS:
        if root == framework or type(optimizer).__module__.startswith(
                f"unified_opt.backends.{framework}"):
            return framework
    raise TypeError(f"{caller}: optimizer must be a torch, Paddle or MindSpore optimizer, "
                    f"got {type(optimizer).__name__}")


def _record(optimizer: Any) -> BuildRecord | None:
    try:
        return record_of(optimizer)
    except ValueError:
        return None


# -- saving -------------------------------------------------------------------------------

def save_state(optimizer: Any, path: FilePath, *, lr_scheduler: Any = None, names: Any = None,
               constant_lr: bool = False) -> None:
    """Write ``optimizer``'s state to the safetensors file ``path`` (module docstring).
    ``lr_scheduler``: a native optimizer's scheduler (a ``uo.build`` optimizer's own is
    found by itself); ``names``: a module or ``(name, parameter)`` pairs naming the
    parameters of a native optimizer or of a ``uo.build`` over unnamed ones
    (``model.parameters()``); ``constant_lr=True``: a native optimizer whose groups show a
    scheduler's traces is saved with its current lr as a constant (else refused, see
    ``uo.from_native``).

    Args:
        optimizer: an optimizer made by ``uo.build``, or a native one.
        path: the safetensors file to write (atomically).
        lr_scheduler: a native optimizer's scheduler, or None.
        names: a module or ``(name, parameter)`` pairs naming the parameters of a
            native optimizer or of a ``uo.build`` over unnamed ones, or None.
        constant_lr: True: a scheduler's traces are saved as the current lr.

    Returns:
        None.

    Raises:
        TypeError: an object of no known framework.
        ValueError: unnamed parameters, or a native optimizer whose spec cannot be read.

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> opt = uo.build(uo.AdamW(lr=1e-3), torch.nn.Linear(4, 2))
        >>> uo.save_state(opt, "run.safetensors")  # doctest: +SKIP
    """
    _write(snapshot_of(optimizer, lr_scheduler=lr_scheduler, names=names,
                       constant_lr=constant_lr), Path(path))


def positional(record: BuildRecord) -> BuildRecord:
    """``record`` with each parameter named by its position in the build (``"0"``,
    ``"1"``, ...) where none of them has a name (a build over ``model.parameters()``),
    as torch's own ``state_dict`` keys its state; else ``record`` itself."""
    if record.names and all(name is None for name in record.names):
        return dataclasses.replace(record, names=[str(i) for i in range(len(record.names))])
    return record


def named_by(record: BuildRecord, names: Any, caller: str = "save_state") -> BuildRecord:
    """``record`` with its parameters named by ``names`` (a module or ``(name,
    parameter)`` pairs, matched by identity): a build over ``model.parameters()`` names
    none of them. Names the build has must agree with ``names``; a parameter ``names``
    does not hold is refused, so no state is written under a made-up name."""
    from .live import parameter_names

    given = parameter_names(names, caller)
    assert given is not None            # (names is given)
    out = []
    for i, (own, p) in enumerate(zip(record.names, record.params)):
        name = given.get(id(p))
        if name is None:
            raise ValueError(f"{caller}: names does not hold the optimizer's parameter {i} "
                             f"(shape {tuple(p.shape)}); pass the module whose parameters "
                             "the optimizer was built over")
        if own is not None and own != name:
            raise ValueError(f"{caller}: names calls the optimizer's parameter {own!r} "
                             f"{name!r}; the optimizer's own names are saved, leave names out")
        out.append(name)
    return dataclasses.replace(record, names=out)


def snapshot_of(optimizer: Any, *, lr_scheduler: Any = None, names: Any = None,
                constant_lr: bool = False, caller: str = "save_state",
                by_position: bool = False) -> Snapshot:
    """What :func:`save_state` writes of ``optimizer`` (its arguments: as there;
    ``by_position``: a ``uo.build`` optimizer of unnamed parameters names them by
    :func:`positional`). The arrays are read-only views of the state where the backend
    can give them (torch's CPU tensors, Paddle's through DLPack, MindSpore's
    ``asnumpy``): use them before the optimizer steps again, or copy them."""
    framework = _framework(optimizer, caller)
    record = _record(optimizer)
    swap = getattr(optimizer, "_swap", None)
    if record is not None and swap is not None and not swap.training and \
            record.spec.swaps_weights:
        # the file holds the parameters at the point to evaluate at and no mode: loaded,
        # they would train from there (unified_opt.weight_swap)
        raise RuntimeError(f"{caller}: the optimizer is in eval mode; call opt.train() "
                           "before saving its state (save the model's weights at the "
                           "point to evaluate at after opt.eval())")
    if record is not None and names is not None:
        record = named_by(record, names, caller)
    if record is not None and by_position:
        record = positional(record)
    backend = _backend_state(framework)
    if record is not None:
        if lr_scheduler is not None and lr_scheduler is not record.lr_scheduler:
            raise ValueError(f"{caller}: lr_scheduler is not the scheduler uo.build made "
                             "for this optimizer (uo.native_scheduler(optimizer)); leave it out")
        snapshot = backend.snapshot_built(saved_record(record, optimizer), optimizer)
        snapshot = dataclasses.replace(snapshot,
                                       group_values=group_values_of(record, optimizer))
    else:
        from .live import read_native

        reading = read_native(optimizer, lr_scheduler, names=names, constant_lr=constant_lr)
        snapshot = backend.snapshot_native(reading, optimizer, names)
    if getattr(snapshot.spec, "data_parallel", False):
        snapshot = dataclasses.replace(snapshot, ranks=_ranks(framework, optimizer))
    return snapshot



def _ranks(framework: str, optimizer: Any) -> tuple[int, int]:
    """(rank, world size) of ``optimizer``'s data-parallel exchange ((0, 1) without one)."""
    exchange = getattr(optimizer, "exchange", None)
    if exchange is None:
        return 0, 1
    if framework == "torch":
        import torch.distributed as dist

        rank = dist.get_rank(getattr(exchange, "group", None))
    elif framework == "paddle":
        import paddle.distributed as dist

        rank = dist.get_rank(getattr(exchange, "group", None))
    else:
        from mindspore.communication import get_rank

        rank = get_rank()
    return int(rank), int(exchange.world_size)


def convert_checkpoint(checkpoint: FilePath | Mapping[str, Any], path: FilePath, *,
                       optimizer: Any, lr_scheduler: Any = None,
                       scheduler_checkpoint: FilePath | Mapping[str, Any] | None = None,
                       names: Any = None,
                       constant_lr: bool = False) -> None:
    """Turn a framework's own checkpoint of a native optimizer into a state file ``path``
    that ``uo.resume`` / ``uo.load_state`` read on any backend.

    Args:
        checkpoint: the framework's checkpoint file, or (torch) its dict (below).
        path: the state file to write.
        optimizer: the native optimizer the checkpoint was taken from, built again.
        lr_scheduler: its scheduler, or None.
        scheduler_checkpoint: torch: the scheduler's ``state_dict`` file or dict.
        names: a module or ``(name, parameter)`` pairs naming the parameters.
        constant_lr: True: a scheduler's traces are saved as the current lr.

    Returns:
        None.

    Raises:
        TypeError: arguments of the wrong type.
        ValueError: a checkpoint that does not fit ``optimizer``, or that
            :func:`save_state` refuses.

    Example:
        >>> uo.convert_checkpoint("opt.pt", "run.safetensors", optimizer=opt)  # doctest: +SKIP

    ``optimizer`` (and ``lr_scheduler``) are the native objects the checkpoint was taken
    from, built again as the script builds them (same class, arguments and parameters,
    as one does before ``load_state_dict``): the checkpoint is loaded into them with the
    framework's own loader, run so that no code in the file can run, and then saved as
    by ``save_state`` (``names`` names their parameters). ``checkpoint``:

    * torch: a file of ``optimizer.state_dict()`` (``torch.save``), read with
      ``torch.load(weights_only=True)``, or that dict; ``scheduler_checkpoint``: a file
      (or dict) of ``lr_scheduler.state_dict()``;
    * Paddle: a ``.pdopt`` file of ``optimizer.state_dict()`` (``paddle.save``; the lr
      scheduler's position is inside), read by an unpickler that builds nothing but
      arrays, numbers, strings, lists and dicts;
    * MindSpore: a ``.ckpt`` file of the optimizer's Parameters (``ms.save_checkpoint``
      of the optimizer or of a training cell holding it; a protobuf, no code).

    ``optimizer`` is changed (it holds the checkpoint's state afterwards). A checkpoint
    whose param groups carry a scheduler's traces (``initial_lr``, ...) needs its
    ``lr_scheduler`` (or ``constant_lr=True``), as for ``save_state``."""
    framework = _framework(optimizer)
    if _record(optimizer) is not None:
        raise TypeError("convert_checkpoint: optimizer must be the native optimizer the "
                        "checkpoint was taken from, not one made by uo.build (save_state "
                        "writes those directly)")
    _backend_state(framework).load_checkpoint(optimizer, lr_scheduler, checkpoint,
                                              scheduler_checkpoint)
    save_state(optimizer, path, lr_scheduler=lr_scheduler, names=names,
               constant_lr=constant_lr)


# -- loading ------------------------------------------------------------------------------

def load_state(optimizer: Any, path: FilePath, *, transform: Transform | None = None,
               model: Any = None) -> None:
    """Restore the state file ``path`` into ``optimizer``, made by ``uo.build`` on any
    backend for the same spec, groups and parameter names. ``transform``: a parameter
    name -> a function applied to each of that parameter's state arrays (e.g.
    ``np.transpose`` between torch's ``(out, in)`` and Paddle's ``(in, out)`` Linear
    weights); a mapping, or a function of the name returning one or None. Each group's
    lr, written hyperparameters and scheduler bookkeeping recorded in the file are set
    back after the state (module docstring); load a scheduler's ``state_dict`` after
    this.

    ``model``: the module whose parameters the optimizer holds (it also names them
    where the optimizer was built over unnamed ones, ``model.parameters()``, as
    ``save_state``'s ``names`` does). A file written on
    another framework is then read under that module's parameter names
    (:func:`.names.name_map`: MindSpore's ``gamma``/``beta`` for torch's LayerNorm
    ``weight``/``bias``) and layouts (a Linear weight's state transposed between torch
    or MindSpore and Paddle) by its module types. Without it a square 2-D weight is
    refused where the two frameworks' layouts differ (:func:`across`).

    Args:
        optimizer: an optimizer made by ``uo.build`` for the saved spec and groups.
        path: the state file.
        transform: parameter name -> a function of each state array, or None.
        model: the module holding the parameters, or None.

    Returns:
        None.

    Raises:
        ValueError: a file for another spec, groups or parameters, a layout that
            cannot be read without ``model``, recorded group values that differ among
            the parameters of one of ``optimizer``'s groups, or a recorded written
            hyperparameter ``optimizer`` cannot take (a Paddle native class or a
            MindSpore ``nn`` class: build with ``path='own'``).

    Example:
        >>> uo.load_state(opt, "run.safetensors", model=model)  # doctest: +SKIP
    """
    load_snapshot(optimizer, read_state(path), transform=transform, model=model)


def load_snapshot(optimizer: Any, saved: Snapshot, *, transform: Transform | None = None,
                  model: Any = None, caller: str = CALLER, source: str = "the file",
                  by_position: bool = False) -> None:
    """What :func:`load_state` does with the snapshot it read (its arguments: as there;
    ``caller`` names the function and ``source`` what was read, in errors): every check
    (spec, groups, names, ranks, each state array's name, shape and dtype) before
    anything is written, so ``optimizer`` is either fully loaded or untouched. The
    backend may keep the arrays it is handed as the state itself: hand over arrays
    nothing else holds. ``by_position``: as for :func:`snapshot_of`."""
    record = _record(optimizer)
    if record is None:
        raise TypeError(f"{caller}: optimizer must be made by uo.build, got "
                        f"{type(optimizer).__name__} (uo.resume builds one from the file)")
    if by_position:
        record = positional(record)
    elif model is not None and record.names and all(n is None for n in record.names):
        # a build over model.parameters(): the file names them as model does
        record = named_by(record, model, caller)
    transform_of = transformer(transform, caller)
    framework = _framework(optimizer, caller)
    saved = across(saved, framework, list(record.names), model_of(model, framework, caller),
                   transform, caller)
    groups = tuple(saved_record(record, optimizer, caller).groups)
    same_spec, same_groups = saved.spec == record.spec, tuple(saved.groups) == groups
    if not (same_spec and same_groups) and sorted(saved.names) == sorted(record.names) \
            and None not in record.names:
        # a file read under other names (across) holds its name rules as the exact names
        # they took: the same rules where they take the same parameters here
        theirs = _exact_rules(saved.spec, saved.groups, record.names, caller)
        mine = _exact_rules(record.spec, groups, record.names, caller)
        if theirs is not None and mine is not None:
            same_spec, same_groups = theirs[0] == mine[0], theirs[1] == mine[1]
    if not same_spec:
        raise ValueError(f"{caller}: {source} holds the state of another spec than the "
                         f"optimizer computes: {spec_differences(saved.spec, record.spec)}")
    if not same_groups:
        # the groups compared, as the file holds them (group dicts as rules of exact names)
        raise ValueError(f"{caller}: {source}'s groups {list(saved.groups)} differ from the "
                         f"optimizer's {list(groups)}")
    if sorted(saved.names) != sorted(record.names):
        missing = sorted(set(record.names) - set(saved.names))
        extra = sorted(set(saved.names) - set(record.names))
        hint = ("" if model is not None or saved.framework == framework else
                f" (written on {saved.framework}: pass model=<the {framework} module> to "
                "read it under that module's names, uo.porting.name_map)")
        raise ValueError(f"{caller}: parameter names differ: not in {source} {missing}, "
                         f"not in the optimizer {extra}{hint}")
    if getattr(saved.spec, "data_parallel", False):
        here = _ranks(framework, optimizer)
        if saved.ranks is None:
            raise ValueError(f"{caller}: {source} holds {saved.spec.name} state (per-rank "
                             "residuals) but records no rank: it cannot be told whose it is; "
                             "save it again with this version of save_state on every rank")
        if saved.ranks != here:
            raise ValueError(f"{caller}: {source} holds rank {saved.ranks[0]}'s state of "
                             f"{saved.ranks[1]} ranks ({saved.spec.name} keeps residuals per "
                             f"rank), and this optimizer is rank {here[0]} of {here[1]}: "
                             "load each rank's own file (save_state on every rank, one file "
                             "per rank, the same world size)")
    backend = _backend_state(framework)
    arrays = {}
    for name, p, plan in zip(record.names, record.params, record.plans):
        expected = backend.expected_state(plan.spec, p)    # name -> (shape, dtype)
        got = dict(saved.arrays[name])
        fn = transform_of(name)
        if fn is not None:
            # a copy: a backend may keep the arrays it is handed as the state itself,
            # and a transform's result may be an array the caller still holds
            got = {k: np.array(fn(a)) for k, a in got.items()}
        if sorted(got) != sorted(expected):
            raise ValueError(f"{caller}: parameter {name!r} has state {sorted(got)} in "
                             f"{source}, the optimizer expects {sorted(expected)}")
        for key, (shape, dtype) in expected.items():
            if got[key].shape != shape:
                raise ValueError(f"{caller}: state {key!r} of {name!r} has shape "
                                 f"{got[key].shape} in {source}, expected {shape}")
            if got[key].dtype != dtype:
                raise ValueError(f"{caller}: state {key!r} of {name!r} is "
                                 f"{dtype_name(got[key].dtype)} in {source}, expected "
                                 f"{dtype_name(dtype)}")
        arrays[name] = got
    check_group_values(record, optimizer, saved, caller, source)
    backend.check_writable(record, optimizer)
    backend.write_built(record, optimizer, saved, arrays)
    set_group_values(record, optimizer, saved)


def _exact_rules(spec: Any, groups: Any, names: list, caller: str) -> tuple | None:
    """``spec``'s name rules and ``groups`` as the exact ``names`` each takes
    (:func:`.names.renamed_rules` without renaming), or None where they do not apply to
    ``names`` (a group taking none of them: compared as written then)."""
    from .names import renamed_rules

    try:
        spec, rules = renamed_rules(spec, list(groups), names, {n: n for n in names}, caller)
    except ValueError:
        return None
    return spec, tuple(rules)


def resume(path: FilePath, params: Any, *, transform: Transform | None = None,
           path_taken: str = "auto", prefer: str = "speed") -> Any:
    """``uo.build`` the saved spec and groups over ``params`` (on their framework), load
    the state into it (``transform``: as for :func:`load_state`), and return the
    optimizer (its scheduler: ``uo.native_scheduler``). ``path_taken`` and ``prefer``:
    ``uo.build``'s ``path`` and ``prefer`` (which class it built, and why:
    ``uo.explain(optimizer)``).

    Args:
        path: the state file (:func:`save_state`).
        params: the parameters to optimize, of any framework (a module reads names and
            layouts, as ``model`` in :func:`load_state`).
        transform: as for :func:`load_state`.
        path_taken: ``uo.build``'s ``path``.
        prefer: ``uo.build``'s ``prefer``.

    Returns:
        The optimizer ``uo.build`` made, holding the saved state.

    Raises:
        ValueError: a file that does not fit ``params``, or what ``uo.build`` refuses.

    Example:
        >>> import paddle
        >>> import unified_opt as uo
        >>> model = paddle.nn.Linear(4, 2)
        >>> opt = uo.resume("run.safetensors", model)  # doctest: +SKIP
    """
    from ..build import build, framework_of, named_parameters

    saved = read_state(path)
    if framework_of(params) is None and not isinstance(params, Mapping):
        params = list(params)                  # read twice: here and by build
    named = named_parameters(params, "resume")
    framework = framework_of(named[0][1]) if named else None
    walks = any(hasattr(params, m) for m in ("named_modules", "named_sublayers",
                                              "cells_and_names"))
    model = params if walks and framework_of(params) == framework else None
    if framework is not None:     # the spec and groups as read on the target (across)
        saved = across(saved, framework, [n for n, _ in named], model, transform)
    optimizer = build(saved.spec, params, groups=list(saved.groups) or None,
                      path=path_taken, prefer=prefer)
    load_state(optimizer, path, transform=transform, model=model)
    return optimizer
