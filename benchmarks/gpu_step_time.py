"""Optimizer step time on a CUDA GPU over GPT-2 small's parameters (issue 20).

    python benchmarks/gpu_step_time.py [--rows GLOB,...] [--engines auto,true,inductor,false]
                                       [--budget-s 180] [--out benchmarks/results]
    python benchmarks/gpu_step_time.py --list           # the rows, by key
    python benchmarks/gpu_step_time.py --device cpu --tiny --out DIR   # smoke run

The parameter set is GPT-2 small's (148 float32 tensors, 124,439,808 elements, built
from its shapes), with fresh random gradients each step: a few gradient sets drawn on
the device once, copied into the gradients in turn before each step. Only
``optimizer.step()`` is timed (the device synchronized before and after); each row's
figure is the median over its timed steps after warm-up, and its ratio is to
``torch.optim.AdamW(fused=True)`` measured first in the same process. Rows:

* ``torch/*``: ``torch.optim.AdamW`` fused (the baseline) and foreach (its default);
* ``uo/*``: ``uo.build(spec, params)`` as a user gets it (AdamW, Adafactor);
* ``own/<algorithm>/<engine>``: ``uo.build(spec, params, path="own", options={"compile":
  engine})`` for AdamW, Lion, LARS, Lamb, CAME and Adafactor, engine "auto", True,
  "inductor" or False (eager: few steps);
* ``peer/*``: the same algorithms in pytorch-optimizer, came-pytorch and torch-optimizer
  (a library that is not installed is a row saying so);
* ``uo/muon`` and ``peer/muon/...``: Muon as most trainings run it, the matrices in
  Muon (the bfloat16 iteration) and the rest in AdamW: ``uo.build(uo.Muon(...,
  others="adamw"), params)`` against ``torch.optim.Muon`` plus ``torch.optim.AdamW`` with
  the same numbers (:data:`MUON`);
* ``offload/*``: ``uo.build(uo.AdamOffload(), params)`` (OffloadAdam: state in host
  memory) and its parts: torch's fused Adam on the CPU over host copies of the same
  tensors, the gradients' copy device->host, the values' copy host->device (pinned).

Per row: median and fastest step ms, × fused AdamW, the first step's seconds (the build
and the first step, compile included), the bytes of the optimizer's state tensors on the
device (``state``: each storage once) and how much device memory the optimizer holds
after its first step (``held``). A row that raises is recorded with its error and the run
goes on. Rows run in order of interest (baselines, default builds, offload, peers, the
own path on "auto", True, False, then "inductor", the slowest to compile) until
``--budget-s`` is spent; the rest are recorded as skipped. The results are written after
every row (``OUT/gpu_step_time.json`` and ``.md``, naming the device, torch and triton),
with the issue's targets met or missed per row:

* speed, as × fused AdamW: AdamW 1.3, Lion 1.2, LARS 1.5, Lamb 2.0, CAME and Adafactor
  2.5, and each faster than the fastest peer of that algorithm in the run (applied to
  the own rows and to the default builds); Muon: faster than its peer;
* the first step (build included) within 30 s (own rows);
* offload within 1.15 × the host's fused Adam alone.

Without CUDA (and no ``--device cpu``) it prints one line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import importlib
import importlib.util
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from algorithm_step_time import ALGORITHMS, PEERS  # this folder's: specs and peer classes

from unified_opt.files import write_text

#: the algorithms with targets, in the order they are reported
TARGET_ALGORITHMS = ("adamw", "lion", "lars", "lamb", "came", "adafactor")
#: issue 20's speed targets: the most × fused AdamW a fast own path may take
SPEED_TARGETS = {"adamw": 1.3, "lion": 1.2, "lars": 1.5, "lamb": 2.0, "came": 2.5,
                 "adafactor": 2.5}
#: the algorithms whose only speed target is to be faster than the fastest peer
PEER_TARGETS = ("muon",)
#: Muon's rows: its spec (the matrices in Muon, the rest in its auxiliary AdamW) and the
#: keywords of torch's two optimizers that compute the same numbers
MUON = {"spec": "Muon(lr=0.02, weight_decay=0.1, ns_dtype='bfloat16', others='adamw')",
        "muon": {"lr": 0.02, "weight_decay": 0.1},
        "adamw": {"lr": 0.02, "weight_decay": 0.1, "betas": (0.9, 0.95), "eps": 1e-10}}
FIRST_STEP_TARGET_S = 30.0
OFFLOAD_TARGET = 1.15
#: own-path engines: the --engines name and the compile option it passes
ENGINES = {"auto": "auto", "true": True, "false": False, "inductor": "inductor"}
#: gradient sets drawn once and used in turn
GRADIENT_SETS = 3
BASELINE_KEY = "torch/adamw-fused"


def gpt2_shapes(vocab=50257, positions=1024, width=768, layers=12):
    """GPT-2's parameter shapes in its module order (Conv1D weights are in x out)."""
    shapes = [(vocab, width), (positions, width)]
    for _ in range(layers):
        shapes += [(width,), (width,),                          # ln_1
                   (width, 3 * width), (3 * width,),            # attn.c_attn
                   (width, width), (width,),                    # attn.c_proj
                   (width,), (width,),                          # ln_2
                   (width, 4 * width), (4 * width,),            # mlp.c_fc
                   (4 * width, width), (width,)]                # mlp.c_proj
    return shapes + [(width,), (width,)]                        # ln_f


TINY = {"vocab": 96, "positions": 16, "width": 8, "layers": 2}


@dataclass
class Row:
    key: str                   # what --rows matches
    algorithm: str
    what: str                  # the label in the table
    run: object                # Bench method taking the row; returns a result dict
    slow: bool = False         # few steps (eager, Inductor)
    extra: dict = field(default_factory=dict)


class Bench:
    """The parameters, the gradient sets and the timing of rows on one device."""

    def __init__(self, torch, device: str, shapes, args):
        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.args = args
        self.shapes = shapes
        torch.manual_seed(0)
        self.params = [torch.nn.Parameter(torch.empty(s, device=self.device)) for s in shapes]
        self.named = [(f"p{i}", p) for i, p in enumerate(self.params)]
        self.pool = [[torch.randn(s, device=self.device) for s in shapes]
                     for _ in range(GRADIENT_SETS)]
        self.turn = 0
        self.reset()

    # -- the parameter set -------------------------------------------------------------
    def reset(self) -> None:
        """Same starting values and fresh gradient tensors for each row."""
        torch = self.torch
        gen = torch.Generator(device=self.device).manual_seed(0)
        with torch.no_grad():
            for p in self.params:
                p.normal_(0.0, 0.02, generator=gen)
                p.grad = torch.empty_like(p)
        self.turn = 0
        self.next_gradients()

    def next_gradients(self) -> None:
        """The next gradient set copied into the gradients (an optimizer may replace or
        keep a reference to ``p.grad``: the copy writes whatever it holds now)."""
        torch = self.torch
        grads = []
        for p in self.params:
            if p.grad is None:
                p.grad = torch.empty_like(p)
            grads.append(p.grad)
        torch._foreach_copy_(grads, self.pool[self.turn % GRADIENT_SETS])
        self.turn += 1

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def allocated(self) -> int | None:
        return self.torch.cuda.memory_allocated(self.device) if self.cuda else None

    def release(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()

    # -- timing ------------------------------------------------------------------------
    def time_steps(self, step, slow: bool, prepare=None) -> dict:
        """Warm-up then timed calls of ``step`` (``prepare`` before each, untimed)."""
        args = self.args
        warmup, most = (args.slow_warmup, args.slow_steps) if slow else (args.warmup, args.steps)
        prepare = self.next_gradients if prepare is None else prepare
        started = time.perf_counter()
        for i in range(warmup):
            if i >= 1 and time.perf_counter() - started > args.row_seconds:
                break
            prepare()
            step()
        settle = args.settle_s if not slow else 0.0
        while time.perf_counter() - started < settle:
            prepare()
            step()
        times, host = [], []
        timed = time.perf_counter()
        while len(times) < most:
            prepare()
            self.sync()
            t0 = time.perf_counter()
            step()
            returned = time.perf_counter()
            self.sync()
            times.append((time.perf_counter() - t0) * 1e3)
            host.append((returned - t0) * 1e3)
            if len(times) >= 3 and time.perf_counter() - timed > args.row_seconds:
                break
        # host_ms: until step() returned (its Python and launches; the GPU may still run)
        return {"ms": round(statistics.median(times), 3), "min_ms": round(min(times), 3),
                "host_ms": round(statistics.median(host), 3), "steps": len(times)}

    def optimizer_row(self, factory, slow: bool, describe=None) -> dict:
        """Build with ``factory(named_params)``, time the first step, then the rest."""
        self.reset()
        self.release()
        self.sync()
        before = self.allocated()
        started = time.perf_counter()
        optimizer = factory(self.named)
        optimizer.step()
        self.sync()
        first = time.perf_counter() - started
        out = {"first_step_s": round(first, 3)}
        if describe is not None:
            out["path"] = describe(optimizer)
        held = self.allocated()
        out["state_bytes"] = state_bytes(optimizer, self.device.type)
        if held is not None:
            out["held_bytes"] = held - before
        out.update(self.time_steps(optimizer.step, slow))
        del optimizer
        self.release()
        return out

    # -- the row kinds -------------------------------------------------------------------
    def torch_adamw(self, row):
        torch = self.torch
        kwargs = {"lr": 1e-3, "weight_decay": 0.01, **row.extra}
        return self.optimizer_row(
            lambda named: torch.optim.AdamW([p for _, p in named], **kwargs), slow=False)

    def uo_build(self, row):
        import unified_opt as uo
        from unified_opt.expressions import parse_spec

        spec = parse_spec(row.extra["spec"])
        mode = row.extra.get("engine")
        own = {} if mode is None else {"path": "own", "options": {"compile": ENGINES[mode]}}
        if "prefer" in row.extra:
            own["prefer"] = row.extra["prefer"]
        return self.optimizer_row(lambda named: uo.build(spec, named, **own), slow=row.slow,
                                  describe=_explained)

    def peer(self, row):
        qualified = row.extra["class"]
        module_name, _, name = qualified.rpartition(".")
        if importlib.util.find_spec(module_name.split(".")[0]) is None:
            return {"skipped": "not installed"}
        cls = getattr(importlib.import_module(module_name), name, None)
        if cls is None:
            return {"skipped": f"{module_name} has no {name}"}
        kwargs = row.extra["kwargs"]
        return self.optimizer_row(lambda named: cls([p for _, p in named], **kwargs),
                                  slow=False)

    def muon_pair(self, row):
        """``torch.optim.Muon`` over the matrices and ``torch.optim.AdamW`` over the rest,
        stepped together (how a torch script runs Muon)."""
        torch = self.torch
        if not hasattr(torch.optim, "Muon"):
            return {"skipped": "torch.optim has no Muon"}

        class Pair:
            def __init__(self, named):
                params = [p for _, p in named]
                self.parts = [torch.optim.Muon([p for p in params if p.ndim == 2],
                                               **MUON["muon"]),
                              torch.optim.AdamW([p for p in params if p.ndim != 2],
                                                **MUON["adamw"])]

            def step(self):
                for part in self.parts:
                    part.step()

            @property
            def state(self):
                return {**self.parts[0].state, **self.parts[1].state}

        return self.optimizer_row(Pair, slow=False)

    def offload(self, row):
        import unified_opt as uo
        from unified_opt.backends.torch.pipeline import HostPipeline
        from unified_opt.backends.torch.staging import StagingRing

        spec = uo.AdamOffload(lr=1e-3)
        options = {"update_on": row.extra["update_on"]} if "update_on" in row.extra else {}

        def build(named):
            optimizer = uo.build(spec, named, options=options)
            if "transfer" in row.extra:     # batches of HostPipeline's default size or
                sizes = {k: row.extra[k] for k in ("batch_elements", "first_batch_elements")
                         if k in row.extra}                      # of the row's
                optimizer.pipeline = HostPipeline(
                    split=True, staging=StagingRing(transfer=row.extra["transfer"]), **sizes)
            return optimizer

        return self.optimizer_row(build, slow=False, describe=_explained)

    def offload_values_kept(self, row):
        """OffloadAdam without the values' download: what that transfer costs (the host
        updates the values it holds; not a mode the library builds)."""
        import unified_opt as uo
        from unified_opt.backends.torch.pipeline import HostPipeline
        from unified_opt.backends.torch.staging import HostStaging

        def build(named):
            optimizer = uo.build(uo.AdamOffload(lr=1e-3), named)
            # the host keeps each value between steps: a buffer per parameter
            optimizer.pipeline = HostPipeline(split=True, staging=HostStaging(),
                                              fetch_values=False)
            return optimizer

        return self.optimizer_row(build, slow=False, describe=_explained)

    def host_adam(self, row):
        """torch's fused Adam on the CPU over host copies: OffloadAdam's host part."""
        torch = self.torch
        host = [torch.nn.Parameter(p.detach().to("cpu", copy=True)) for p in self.params]
        pool = [[g.to("cpu") for g in grads] for grads in self.pool[:2]]
        turn = [0]

        def prepare():
            for p, g in zip(host, pool[turn[0] % 2]):
                p.grad = g
            turn[0] += 1

        prepare()
        started = time.perf_counter()
        optimizer = torch.optim.Adam(host, lr=1e-3, fused=True)
        optimizer.step()
        out = {"first_step_s": round(time.perf_counter() - started, 3),
               "state_bytes": state_bytes(optimizer, self.device.type)}
        out.update(self.time_steps(optimizer.step, slow=False, prepare=prepare))
        return out      # the host copies go with this frame

    def copies(self, row):
        """One direction of OffloadAdam's traffic: every tensor, pinned host buffers."""
        torch = self.torch
        pin = self.cuda
        host = [torch.empty(p.shape, dtype=p.dtype, pin_memory=pin) for p in self.params]
        if row.extra["direction"] == "down":
            def copy():
                for h, p in zip(host, self.params):
                    h.copy_(p.grad, non_blocking=pin)
        else:
            def copy():
                with torch.no_grad():
                    for h, p in zip(host, self.params):
                        p.copy_(h, non_blocking=pin)
        self.reset()
        out = self.time_steps(copy, slow=False, prepare=lambda: None)
        out["bytes"] = sum(h.numel() * h.element_size() for h in host)
        return out


def _explained(optimizer) -> str:
    import unified_opt as uo

    decision = uo.explain(optimizer)
    return decision.native if decision.path == "native" else "own"


def state_bytes(optimizer, device_type: str) -> int:
    """Bytes of the optimizer's state tensors on ``device_type``, each storage once."""
    import torch

    storages = {}

    def visit(value):
        if isinstance(value, torch.Tensor):
            if value.device.type == device_type:
                storage = value.untyped_storage()
                storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)

    for state in optimizer.state.values():
        visit(state)
    return sum(storages.values())


def all_rows(bench_cls=Bench) -> list[Row]:
    """Every row, in the order they run."""
    rows = [Row(BASELINE_KEY, "adamw", "torch.optim.AdamW(fused=True) (baseline)",
                bench_cls.torch_adamw, extra={"fused": True}),
            Row("torch/adamw-foreach", "adamw", "torch.optim.AdamW (foreach, its default)",
                bench_cls.torch_adamw),
            Row("uo/adamw", "adamw", "uo.build(uo.AdamW(...)) (default build)",
                bench_cls.uo_build, extra={"spec": ALGORITHMS["adamw"]}),
            Row("uo/adafactor", "adafactor", "uo.build(uo.Adafactor(...)) (default build)",
                bench_cls.uo_build, extra={"spec": ALGORITHMS["adafactor"]}),
            # the native classes themselves (prefer="native"): what the speed table
            # weighs the own path against, whichever the default build takes
            Row("native/adamw", "adamw", "uo.build(uo.AdamW(...), prefer='native')",
                bench_cls.uo_build, extra={"spec": ALGORITHMS["adamw"], "prefer": "native"}),
            Row("native/adafactor", "adafactor",
                "uo.build(uo.Adafactor(...), prefer='native')", bench_cls.uo_build,
                extra={"spec": ALGORITHMS["adafactor"], "prefer": "native"}),
            Row("offload/adam", "adam_offload", "uo.build(uo.AdamOffload()) (OffloadAdam)",
                bench_cls.offload),
            Row("offload/adam-copy-engine", "adam_offload",
                "OffloadAdam through the copy engines, batches of 2**23 (the default "
                "before 2026-11-26)", bench_cls.offload, extra={"transfer": "copy-engine"}),
            Row("offload/adam-table", "adam_offload",
                "OffloadAdam as built, its transfers a Triton kernel a batch over an "
                "address table (StagingRing(transfer='table'))", bench_cls.offload,
                extra={"transfer": "table", "batch_elements": 1 << 21,
                       "first_batch_elements": 1 << 19}),
            Row("offload/adam-on-device", "adam_offload",
                "uo.build(uo.AdamOffload(), options={'update_on': 'device'}): the GPU's "
                "fused Adam over the state in pinned host memory", bench_cls.offload,
                extra={"update_on": "device"}),
            Row("offload/adam-values-kept", "adam_offload",
                "part: OffloadAdam without the values' download, a buffer per parameter "
                "(a measurement only)",
                bench_cls.offload_values_kept),
            Row("offload/host-adam", "adam_offload",
                "part: torch.optim.Adam(fused=True) on the CPU, host copies",
                bench_cls.host_adam),
            Row("offload/copy-down", "adam_offload", "part: gradients device->host (pinned)",
                bench_cls.copies, extra={"direction": "down"}),
            Row("offload/copy-up", "adam_offload", "part: values host->device (pinned)",
                bench_cls.copies, extra={"direction": "up"})]
    rows += [Row("uo/muon", "muon", "uo.build(uo.Muon(..., others='adamw')) (default build)",
                 bench_cls.uo_build, extra={"spec": MUON["spec"]}),
             Row("peer/muon/torch.optim.Muon+AdamW", "muon",
                 "torch.optim.Muon (matrices) + torch.optim.AdamW (the rest)",
                 bench_cls.muon_pair)]
    for algorithm in TARGET_ALGORITHMS:
        for qualified, kwargs in PEERS.get(algorithm, []):
            if qualified.startswith("torch.optim."):
                continue
            rows.append(Row(f"peer/{algorithm}/{qualified}", algorithm, qualified,
                            bench_cls.peer, extra={"class": qualified, "kwargs": kwargs}))
    for engine in ("auto", "true", "false", "inductor"):
        for algorithm in TARGET_ALGORITHMS:
            label = {"auto": '"auto"', "true": "True", "false": "False (eager)",
                     "inductor": '"inductor"'}[engine]
            rows.append(Row(f"own/{algorithm}/{engine}", algorithm,
                            f"uo own, compile={label}", bench_cls.uo_build,
                            slow=engine in ("false", "inductor"),
                            extra={"spec": ALGORITHMS[algorithm], "engine": engine}))
    return rows


def selected(rows: list[Row], args) -> list[Row]:
    patterns = [p for p in (args.rows or "").split(",") if p]
    engines = set(args.engines.split(","))
    unknown = engines - set(ENGINES)
    if unknown:
        raise SystemExit(f"--engines: unknown {sorted(unknown)}; choose from {sorted(ENGINES)}")
    out = []
    for row in rows:
        if row.key.startswith("own/") and row.extra["engine"] not in engines:
            continue
        if patterns and not any(fnmatch.fnmatch(row.key, p) for p in patterns) \
                and row.key != BASELINE_KEY:
            continue
        out.append(row)
    return out


# -- targets ---------------------------------------------------------------------------

def judge(results: list[dict], on_gpu: bool = True) -> None:
    """Set ``target`` (text) and ``met`` on the rows the issue's targets apply to
    (``on_gpu``: whether OffloadAdam's state must be 0 bytes on the device)."""
    by_key = {r["key"]: r for r in results}
    fastest_peer = {}
    for r in results:
        if r["key"].startswith("peer/") and "ms" in r:
            best = fastest_peer.get(r["algorithm"])
            if best is None or r["ms"] < best["ms"]:
                fastest_peer[r["algorithm"]] = r
    for r in results:
        r.pop("target", None)
        r.pop("met", None)
        applies = r["key"].startswith(("own/", "uo/")) and (
            r["algorithm"] in SPEED_TARGETS or r["algorithm"] in PEER_TARGETS)
        if applies:
            bar = SPEED_TARGETS.get(r["algorithm"], math.inf)
            peer = fastest_peer.get(r["algorithm"])
            text = f"≤ {bar}×" if bar < math.inf else ""
            if peer is not None:
                text += f"{' and ' if text else ''}< {peer['what']} ({peer['ms']} ms)"
            if r["key"].startswith("own/"):
                text += f"; first step ≤ {FIRST_STEP_TARGET_S:g} s"
            r["target"] = text
            if "ratio" in r:
                met = r["ratio"] <= bar and (peer is None or r["ms"] < peer["ms"])
                if r["key"].startswith("own/"):
                    met = met and r["first_step_s"] <= FIRST_STEP_TARGET_S
                r["met"] = met
        elif r["key"].startswith("offload/adam"):
            host = by_key.get("offload/host-adam")
            measured = "ms" in r and host is not None and "ms" in host
            if measured:
                r["over_host_adam"] = round(r["ms"] / host["ms"], 3)
            # the target: the default build, and the opt-in update on the device
            if r["key"] in ("offload/adam", "offload/adam-on-device"):
                r["target"] = (f"≤ {OFFLOAD_TARGET}× the host's fused Adam alone; 0 B "
                               "state on GPU")
                if measured:
                    r["met"] = (r["ms"] <= OFFLOAD_TARGET * host["ms"] and
                                (not on_gpu or r.get("state_bytes", 0) == 0))


# -- reports ---------------------------------------------------------------------------

def _mb(value) -> str:
    return "" if value is None else f"{value / 2**20:.1f}"


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# Optimizer step time on {env['device_name']}", "",
             f"torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, "
             f"Python {env['python']}; {env['host_threads']} host threads. "
             f"Parameters: {report['parameters']['name']} "
             f"({report['parameters']['tensors']} float32 tensors, "
             f"{report['parameters']['elements']:,} elements), fresh random gradients each "
             f"step. Median step ms over the timed steps; × is to "
             f"torch.optim.AdamW(fused=True) in the same run "
             f"({report.get('baseline_ms')} ms). First step: the build and the first step, "
             f"compile included. Host ms: until the step returned (its Python and kernel "
             f"launches; the GPU may still be running). State MB: the optimizer's state "
             f"tensors on the device; held "
             f"MB: device memory the optimizer holds after its first step.", "",
             "| row | algorithm | step | path | ms | host ms | × fused AdamW | first step s | "
             "state MB | held MB | target | met |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if "ms" in r:
            ms, ratio = r["ms"], r.get("ratio", "")
        else:
            ms, ratio = r.get("error") or r.get("skipped", ""), ""
            ms = str(ms).replace("|", "/").replace("\n", " ")[:200]
        met = {True: "met", False: "**missed**"}.get(r.get("met"), "")
        if "over_host_adam" in r:
            ratio = f"{ratio} ({r['over_host_adam']}× host Adam)"
        if "bytes" in r and "ms" in r:
            ratio = f"{ratio} ({r['bytes'] / r['ms'] / 1e6:.1f} GB/s)"
        lines.append(f"| `{r['key']}` | {r['algorithm']} | {r['what']} | {r.get('path', '')} | "
                     f"{ms} | {r.get('host_ms', '')} | {ratio} | {r.get('first_step_s', '')} | "
                     f"{_mb(r.get('state_bytes'))} | {_mb(r.get('held_bytes'))} | "
                     f"{r.get('target', '')} | {met} |")
    lines += ["", f"Total {report['seconds']:.0f} s; rows not run: the time budget "
              f"(--budget-s {report['budget_s']}) or the command line's filters."]
    return "\n".join(lines) + "\n"


def _verdict(row: dict) -> str:
    return {True: "met", False: "MISSED"}.get(row.get("met"), "")


def compact(report: dict) -> str:
    lines = [f"{'row':<44} {'ms':>9} {'×fused':>7} {'first s':>8} {'state MB':>9}  met"]
    for r in report["rows"]:
        if "ms" in r:
            lines.append(f"{r['key']:<44} {r['ms']:>9.3f} {r.get('ratio', ''):>7} "
                         f"{r.get('first_step_s', ''):>8} {_mb(r.get('state_bytes')):>9}  "
                         f"{_verdict(r)}")
        else:
            text = (r.get("error") or r.get("skipped", "")).splitlines()[0][:80]
            lines.append(f"{r['key']:<44} {text}")
    return "\n".join(lines)


def environment(torch, device) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except Exception:       # no triton (CPU builds): said so, not an error
        triton_version = "not installed"
    cuda = device.type == "cuda"
    return {"device": str(device),
            "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor()
            or "cpu", "torch": torch.__version__, "triton": triton_version,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "host_threads": torch.get_num_threads()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: a smoke run of every row's code (use with --tiny)")
    parser.add_argument("--tiny", action="store_true",
                        help=f"a small GPT-2-shaped set {TINY} instead of GPT-2 small")
    parser.add_argument("--rows", default="",
                        help="comma-separated globs over row keys (see --list); the "
                             "baseline always runs")
    parser.add_argument("--engines", default="auto,true,false,inductor",
                        help="own-path engines to run: auto,true,false,inductor")
    parser.add_argument("--budget-s", type=float, default=180.0,
                        help="start no row after this many seconds (the rest are skipped)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40, help="most timed steps of a row")
    parser.add_argument("--slow-warmup", type=int, default=1)
    parser.add_argument("--slow-steps", type=int, default=3,
                        help="most timed steps of an eager or Inductor own row")
    parser.add_argument("--row-seconds", type=float, default=3.0,
                        help="stop warm-up and timing of a row after this long (at least "
                             "1 warm-up and 3 timed steps)")
    parser.add_argument("--settle-s", type=float, default=0.0,
                        help="keep warming up each fast row this long (an engine that "
                             "compiles in the background)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results on CUDA, a temporary folder on "
                             "the CPU")
    parser.add_argument("--list", action="store_true", help="print the row keys and exit")
    args = parser.parse_args(argv)
    if args.list:
        for row in selected(all_rows(), args):
            print(f"{row.key:<44} {row.what}")
        return 0
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_step_time: CUDA is not available here; nothing measured "
              "(--device cpu --tiny runs the rows' code on the CPU)")
        return 0
    if args.out is None:
        args.out = (Path(__file__).parent / "results" if args.device == "cuda" else
                    Path(tempfile.mkdtemp(prefix="gpu_step_time-")))
    started = time.perf_counter()
    shapes = gpt2_shapes(**TINY) if args.tiny else gpt2_shapes()
    bench = Bench(torch, args.device, shapes, args)
    report = {"environment": environment(torch, bench.device),
              "parameters": {"name": "GPT-2 small shapes, tiny" if args.tiny else
                             "GPT-2 small", "tensors": len(shapes),
                             "elements": sum(p.numel() for p in bench.params)},
              "budget_s": args.budget_s, "targets": {
                  "speed_x_fused_adamw": SPEED_TARGETS, "first_step_s": FIRST_STEP_TARGET_S,
                  "offload_x_host_adam": OFFLOAD_TARGET,
                  "also": "each faster than the fastest peer of its algorithm in the run"},
              "rows": []}
    print(f"gpu_step_time: {report['environment']['device_name']}, "
          f"{report['parameters']['tensors']} tensors, "
          f"{report['parameters']['elements']:,} elements -> {args.out}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    baseline = None
    for row in selected(all_rows(), args):
        result = {"key": row.key, "algorithm": row.algorithm, "what": row.what}
        if time.perf_counter() - started > args.budget_s and row.key != BASELINE_KEY:
            result["skipped"] = "time budget spent"
        else:
            try:
                result.update(row.run(bench, row))
            except Exception as error:      # recorded; the other rows still run
                result["error"] = f"{type(error).__name__}: {error}".strip()[:2000]
            bench.release()                 # (after the except: its traceback is gone)
        if row.key == BASELINE_KEY and "ms" in result:
            baseline = result["ms"]
        if baseline and "ms" in result and not row.key.startswith("offload/copy"):
            result["ratio"] = round(result["ms"] / baseline, 3)
        report["rows"].append(result)
        report["baseline_ms"] = baseline
        report["seconds"] = round(time.perf_counter() - started, 1)
        judge(report["rows"], on_gpu=bench.cuda)
        _write(args.out, report)
        line = compact({"rows": [result]}).splitlines()[-1]
        print(f"[{report['seconds']:6.1f} s] {line}", flush=True)
    print(compact(report))
    print(f"wrote {args.out / 'gpu_step_time.json'} and .md in {report['seconds']:.0f} s")
    return 0


def _write(out: Path, report: dict) -> None:
    write_text(out / "gpu_step_time.json", json.dumps(report, indent=1) + "\n")
    write_text(out / "gpu_step_time.md", markdown(report))


if __name__ == "__main__":
    sys.exit(main())
