"""Peak extra memory of ``uo.save_state`` and ``uo.load_state`` against the state's size.

    python benchmarks/state_memory.py [--framework torch,paddle,mindspore]
                                      [--elements 50000000] [--tensors 10]
                                      [--old 996d90c] [--old-backend 19db3a2]
                                      [--out benchmarks/results]

An AdamW (``uo.build``) over ``--elements`` float32 parameters in ``--tensors`` equal
tensors takes one step, so that it holds ``exp_avg`` and ``exp_avg_sq``: a state of
2 x 4 x elements bytes (50M: 381 MiB). torch is measured on its default path; Paddle and
MindSpore on the own path (their default at this size) and on the native class
(``path="native"``: ``paddle.optimizer.AdamW``, ``mindspore.experimental.optim.AdamW``).
Each measurement runs in a fresh child process (one framework per process: Paddle and
MindSpore cannot share one, and importing Paddle sets OMP_NUM_THREADS=1; no allocator
history), which resets its peak resident size (Linux ``/proc/self/clear_refs`` 5, as
``algorithm_step_time.py`` does), runs the call and reads ``VmHWM`` minus the resident
size before the call (with glibc's mmap threshold fixed at 128 KiB, so that every large
array is a mapping of its own, returned when freed: the peak counts the bytes alive
at once, not the allocator's reuse of freed heap):

* ``save``: ``uo.save_state(opt, path)`` over an existing file (extra beyond the state
  the optimizer holds);
* ``write``: the file layer alone, ``porting.state._write`` of a snapshot taken before;
* ``read``: ``porting.state.read_state(path)``, kept alive: extra beyond the arrays it
  returns (the state's size is subtracted from the peak increase);
* ``load``: ``uo.load_state(opt, path)`` into the optimizer, which already holds a
  state of that size: the arrays read are made before the optimizer's old ones are
  dropped (or copied into), so the state's size is subtracted from the peak increase as
  for ``read`` (both figures are in the results).

The target (issue 41) is an extra of at most 0.25 x the state's size for save and for
load. The "before" rows run older code under the names save and load call: for torch,
``--old REV`` (the code before the streaming writer: ``unified_opt/porting/state.py``'s
``_write``, ``read_state`` and ``state_layout`` and ``backends/torch/state.py``'s
``_numpy`` and ``_tensor``); for Paddle and MindSpore, ``--old-backend REV``: the
backend's whole ``state`` module as of ``REV`` (before its snapshots shared the state's
memory), with today's file layer. ``--framework`` (a comma-separated list) measures only
those frameworks; the rows of the others are kept from the results file when it was
made with the same ``--elements`` and ``--tensors``. Results go to
``state_memory.{json,md}`` in ``--out``, written atomically.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from peak_memory import reset_peak, status_mib  # this folder's

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
TARGET = 0.25
FRAMEWORKS = ("torch", "paddle", "mindspore")
#: the paths measured per framework (``uo.build``'s ``path``; "default": not given)
PATHS = {"torch": ("default",), "paddle": ("own", "native"), "mindspore": ("own", "native")}
MODES = ("save", "write", "read", "load")
MMAP_THRESHOLD = 1 << 17


def _old_module(rev: str, path: str, package: str):
    """The module at ``path`` as of git revision ``rev``, loaded beside the current one
    (in ``package``, so its relative imports resolve)."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    module = types.ModuleType(f"{package}.{Path(path).stem}_old")
    module.__package__ = package
    sys.modules[module.__name__] = module      # dataclasses looks its module up there
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def _use_old_torch(rev: str) -> None:
    """Put the code as of ``rev`` under the names save and load call: the file layer
    (``_write``, ``read_state``, ``state_layout``) and the torch backend's conversion of
    state tensors to and from numpy (``_numpy``, ``_tensor``)."""
    from unified_opt.backends.torch import state as torch_state
    from unified_opt.porting import state

    old = _old_module(rev, "unified_opt/porting/state.py", "unified_opt.porting")
    state._write, state.read_state = old._write, old.read_state
    state.state_layout = torch_state.state_layout = old.state_layout
    old_torch = _old_module(rev, "backends/torch/state.py", "unified_opt.backends.torch")
    torch_state._numpy, torch_state._tensor = old_torch._numpy, old_torch._tensor


def _use_old_backend(framework: str, rev: str) -> None:
    """Make save and load call the ``framework`` backend's ``state`` module as of
    ``rev`` (the file layer stays today's)."""
    from unified_opt.porting import state

    old = _old_module(rev, f"backends/{framework}/state.py",
                      f"unified_opt.backends.{framework}")
    current = state._backend_state
    state._backend_state = lambda name: old if name == framework else current(name)


def _torch_optimizer(path: str, size: int, tensors: int):
    import torch

    import unified_opt as uo

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(size)) for _ in range(tensors)]
    optimizer = uo.build(uo.AdamW(lr=1e-3, weight_decay=0.01),
                         [(f"p{i}", p) for i, p in enumerate(params)])
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    for p in params:
        p.grad = None
    return optimizer, params


def _paddle_optimizer(path: str, size: int, tensors: int):
    import paddle

    import unified_opt as uo

    zero = paddle.nn.initializer.Constant(0.0)
    params = [paddle.create_parameter([size], "float32", default_initializer=zero)
              for _ in range(tensors)]
    optimizer = uo.build(uo.AdamW(lr=1e-3, weight_decay=0.01),
                         [(f"p{i}", p) for i, p in enumerate(params)], path=path)
    paddle.add_n([p.sum() for p in params]).backward()      # gradients of ones
    optimizer.step()
    optimizer.clear_grad(set_to_zero=False)
    return optimizer, params


def _mindspore_optimizer(path: str, size: int, tensors: int):
    import numpy as np
    from mindspore import Parameter, Tensor

    import unified_opt as uo

    params = [Parameter(Tensor(np.zeros(size, np.float32)), name=f"p{i}")
              for i in range(tensors)]
    optimizer = uo.build(uo.AdamW(lr=1e-3, weight_decay=0.01),
                         [(f"p{i}", p) for i, p in enumerate(params)], path=path)
    optimizer(tuple(Tensor(np.ones(size, np.float32)) for _ in params))
    return optimizer, params


OPTIMIZERS = {"torch": _torch_optimizer, "paddle": _paddle_optimizer,
              "mindspore": _mindspore_optimizer}


def measure(framework: str, path: str, mode: str, elements: int, tensors: int, folder: str,
            old: str | None) -> dict:
    """In this process: build and step the optimizer, then measure ``mode``."""
    import unified_opt as uo
    from unified_opt.porting import state

    size = elements // tensors
    optimizer, params = OPTIMIZERS[framework](path, size, tensors)
    state_bytes = 2 * 4 * size * tensors
    file = Path(folder) / "run.safetensors"
    if old is not None:
        if framework == "torch":
            _use_old_torch(old)
        else:
            _use_old_backend(framework, old)
    if mode != "save" and not file.exists():
        uo.save_state(optimizer, file)
    snapshot = None
    if mode == "write":
        from unified_opt.backend import record_of

        snapshot = state._backend_state(framework).snapshot_built(record_of(optimizer),
                                                                  optimizer)
    gc.collect()
    before = status_mib("VmRSS")
    reset_peak()
    kept = None
    if mode == "save":
        uo.save_state(optimizer, file)
    elif mode == "write":
        state._write(snapshot, file)
    elif mode == "read":
        kept = state.read_state(file)
    else:
        uo.load_state(optimizer, file)
    peak = status_mib("VmHWM")
    del kept
    # read and load make the arrays of the state they return (a load's new state exists
    # before each array of the old one is dropped or overwritten); save and write
    # return nothing
    returned = state_bytes / MIB if mode in ("read", "load") else 0.0
    extra = peak - before - returned
    return {"framework": framework, "path": path, "mode": mode,
            "class": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
            "state_mib": state_bytes / MIB, "file_mib": file.stat().st_size / MIB,
            "rss_before_mib": before, "peak_mib": peak, "peak_increase_mib": peak - before,
            "returned_mib": returned, "extra_mib": extra,
            "ratio": extra / (state_bytes / MIB)}


def _child(framework: str, path: str, mode: str, args, folder: str,
           old: str | None) -> dict:
    command = [sys.executable, __file__, "--measure", mode, "--framework", framework,
               "--path", path, "--elements", str(args.elements), "--tensors",
               str(args.tensors), "--folder", folder]
    if old is not None:
        command += ["--old-code", old]
    # a fixed mmap threshold: every large array is its own mapping, returned to the OS
    # when freed, so the peak is the bytes alive at once, not glibc's reuse of freed heap
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{framework} {path} {mode} ({old or 'new'}) failed:\n"
                           f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def markdown(result: dict) -> str:
    lines = ["# Peak extra memory of state files (issue 41)", "",
             f"AdamW, {result['elements']:,} float32 parameters in {result['tensors']} "
             f"tensors: state {result['state_mib']:.0f} MiB (file "
             f"{result['file_mib']:.0f} MiB). torch: `uo.build`'s default path; Paddle and "
             "MindSpore: the own path (their default at this size) and the native class "
             "(`path=\"native\"`). Each row: one child process, VmHWM after the call minus "
             "VmRSS before it (clear_refs 5): the peak increase; extra = that minus the "
             "state `read` returns and `load` makes (its new arrays exist before the "
             "optimizer's old ones are dropped or overwritten); `write` is the file layer "
             "alone (a snapshot taken before). "
             f"Target: extra <= {TARGET} x the state's size.", "",
             "| framework | path | call | code | peak increase MiB | returned MiB | "
             "extra MiB | extra / state | within target |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['framework']} | {row['path']} | {row['mode']} | {row['code']} "
                     f"| {row['peak_increase_mib']:.1f} | {row['returned_mib']:.1f} | "
                     f"{row['extra_mib']:.1f} | {row['ratio']:.3f} | "
                     f"{'yes' if row['ratio'] <= TARGET else 'no'} |")
    classes = sorted({f"{row['framework']} {row['path']}: `{row['class']}`"
                      for row in result["rows"] if "class" in row})
    torch_old = (f"`unified_opt/porting/state.py` (`_write`, `read_state`, `state_layout`) "
                 f"and `backends/torch/state.py` (`_numpy`, `_tensor`) at {result['old']}"
                 if result["old"] else "not measured")
    backend_old = (f"`backends/<framework>/state.py` at {result['old_backend']} (today's "
                   "file layer)" if result["old_backend"] else "not measured")
    lines += ["", f"Classes: {'; '.join(classes)}." if classes else "",
              f"Machine: {result['machine']}; python {result['python']}; children run "
              f"with MALLOC_MMAP_THRESHOLD_={result['mmap_threshold']}; before, torch: "
              f"{torch_old}; before, Paddle and MindSpore: {backend_old}.",
              "Reproduce: `python benchmarks/state_memory.py` (one framework: "
              "`--framework paddle`).", ""]
    return "\n".join(lines)


def _frameworks(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(FRAMEWORKS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--framework: {text!r} names no framework of "
                                         f"{list(FRAMEWORKS)} (comma-separated)")
    return names


def _kept_rows(out: Path, args, measured: list[str]) -> list[dict]:
    """The rows of the frameworks not measured now, from the results file of the same
    size (none when there is none)."""
    try:
        old = json.loads((out / "state_memory.json").read_text())
    except FileNotFoundError:
        return []
    if (old.get("elements"), old.get("tensors")) != (args.elements, args.tensors):
        return []
    return [row for row in old["rows"]
            if row.get("framework", "torch") not in measured]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", type=_frameworks, default=list(FRAMEWORKS),
                        help="comma-separated: torch, paddle, mindspore (default: all)")
    parser.add_argument("--elements", type=int, default=50_000_000)
    parser.add_argument("--tensors", type=int, default=10)
    parser.add_argument("--old", default="996d90c",
                        help="git revision of torch's old file layer ('' to skip it)")
    parser.add_argument("--old-backend", default="19db3a2",
                        help="git revision of the Paddle and MindSpore state modules "
                             "before they shared memory ('' to skip them)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--measure", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--old-code", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.framework[0], args.path, args.measure, args.elements,
                                 args.tensors, args.folder, args.old_code)))
        return 0
    from unified_opt.files import write_text

    rows = []
    for framework in args.framework:
        before = args.old if framework == "torch" else args.old_backend
        for old in ([None, before] if before else [None]):
            for path in PATHS[framework]:
                for mode in MODES:
                    with tempfile.TemporaryDirectory() as folder:
                        row = _child(framework, path, mode, args, folder, old)
                    row["code"] = "before (" + old + ")" if old else "now"
                    rows.append(row)
                    print(f"{framework:>9} {path:>7} {row['code']:>20} {mode:>6}: extra "
                          f"{row['extra_mib']:8.1f} MiB = {row['ratio']:.3f} x state",
                          flush=True)
    kept = _kept_rows(args.out, args, args.framework)
    order = {name: i for i, name in enumerate(FRAMEWORKS)}
    rows = sorted(kept + rows, key=lambda row: order[row.get("framework", "torch")])
    for row in rows:                    # rows of the results before this option existed
        row.setdefault("framework", "torch")
        row.setdefault("path", "default")
    result = {"elements": args.elements, "tensors": args.tensors,
              "state_mib": rows[0]["state_mib"], "file_mib": rows[0]["file_mib"],
              "target_ratio": TARGET, "old": args.old, "old_backend": args.old_backend,
              "mmap_threshold": MMAP_THRESHOLD,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "python": platform.python_version(), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "state_memory.json", json.dumps(result, indent=1) + "\n")
    write_text(args.out / "state_memory.md", markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
