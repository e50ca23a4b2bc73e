"""Where ``OffloadAdam``'s time goes on a CUDA machine (issue 20's offload target).

``gpu_step_time.py`` measures ``OffloadAdam`` at 1.46-1.59x the host's fused Adam alone
while the copies it overlaps take less than the host's update. This probe times the
suspects one at a time on the GPT-2-small set, in one process:

* the host's fused Adam alone (the baseline row, and over pageable memory the thread
  pool touched), and a triad over the same bytes (``c = a + s * b``: how much of the
  host's memory bandwidth the update uses);
* the same update while copies of ``OffloadAdam``'s volume run on a side stream
  (memory traffic shared with the DMA engines), and cut into the pipeline's batches;
  the host time a step takes to lay out its pieces;
* the host time to queue the downloads, and the pipeline's transfers with no update;
* ``OffloadAdam`` itself (with the host's time in each part of the step: the update,
  ``adam_ms``, and torch's kernel inside it, ``adam_kernel_ms``; queueing the copies;
  waiting for batches, the first one alone in ``first_wait_ms``; the loop's own Python,
  ``other_ms``; and ``tail_ms``, from the step's return until the last uploads are done;
  and the staging buffers' bytes): through the ring of staging slots (the default), through a
  buffer per parameter (before), and through rings of smaller slots, whose batches stay
  in the host's cache between the copy and the update; each batch moved by the copy
  engines, by a ``torch._foreach_copy_`` kernel or by a Triton kernel over an address
  table (``transfer="table"``);
* for comparison, the GPU's own fused Adam with the moments in mapped host memory
  (zero-copy: 0 bytes of state on the GPU, the update the GPU's, not the host's).

Earlier runs also timed pinned, registered and batch-size variants (no difference):
``benchmarks/results/offload_probe_h100/``. Also records the host's memory nodes, CPU
affinity and transparent-huge-page setting. Writes ``OUT/offload_probe.{json,md}``.
Without CUDA it says so and exits 0 unless ``--device cpu --tiny`` asks for a dry run of
the code (no pinning, no streams; the offload rows stage the CPU parameters through their
buffers).

    python benchmarks/offload_probe.py --out DIR
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_step_time import TINY, gpt2_shapes  # noqa: E402  this folder's

from unified_opt.devices import cpu_info  # noqa: E402
from unified_opt.files import write_text  # noqa: E402


def host_facts() -> dict:
    def read(path):
        try:
            return Path(path).read_text().strip()
        except OSError:
            return None

    nodes = {Path(n).name: read(f"{n}/cpulist")
             for n in sorted(glob.glob("/sys/devices/system/node/node[0-9]*"))}
    return {"memory_nodes": nodes, "cpu_model": cpu_info()[0],
            "affinity": len(os.sched_getaffinity(0)),
            "transparent_hugepage": read("/sys/kernel/mm/transparent_hugepage/enabled")}


class Probe:
    def __init__(self, torch, device, shapes, steps):
        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.steps = steps
        torch.manual_seed(0)
        self.params = [torch.nn.Parameter(torch.randn(s, device=self.device) * 0.02)
                       for s in shapes]
        self.pool = [[torch.randn(s, device=self.device) for s in shapes] for _ in range(2)]
        self.turn = 0
        self.bytes = sum(p.numel() * p.element_size() for p in self.params)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def next_gradients(self):
        for p, g in zip(self.params, self.pool[self.turn % 2]):
            p.grad = g
        self.turn += 1

    def timed(self, step, prepare=None) -> dict:
        prepare = prepare or self.next_gradients
        times = []
        for i in range(2 + self.steps):
            prepare()
            self.sync()
            t0 = time.perf_counter()
            step()
            self.sync()
            if i >= 2:
                times.append((time.perf_counter() - t0) * 1e3)
        return {"ms": round(statistics.median(times), 3), "min_ms": round(min(times), 3)}

    def release(self):
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()
            getattr(self.torch._C, "_host_emptyCache", lambda: None)()

    # -- the host's update alone ---------------------------------------------------------
    def host_memory(self, how: str):
        """Host params, two gradient sets and an Adam over them, memory laid out ``how``:
        ``"to-cpu"`` (``.to("cpu")``, gpu_step_time's row) or ``"pageable"`` (zeros the
        thread pool touched)."""
        torch = self.torch

        def tensor(p):
            if how == "to-cpu":
                return p.detach().to("cpu", copy=True)
            return torch.zeros(p.shape).copy_(p.detach())

        host = [torch.nn.Parameter(tensor(p)) for p in self.params]
        grads = [[tensor(g) for g in pool] for pool in self.pool]
        optimizer = torch.optim.Adam(host, lr=1e-3, fused=True)
        for p, g in zip(host, grads[0]):
            p.grad = g
        optimizer.step()
        turn = [0]

        def prepare():
            for p, g in zip(host, grads[turn[0] % 2]):
                p.grad = g
            turn[0] += 1

        return optimizer, prepare

    def host_adam(self, how: str) -> dict:
        optimizer, prepare = self.host_memory(how)
        out = self.timed(optimizer.step, prepare)
        # Adam reads the value, gradient and both moments and writes three of them
        out["GB/s"] = round(7 * self.bytes / out["ms"] / 1e6, 1)
        return out

    def host_triad(self) -> dict:
        """``c = a + s * b`` over host tensors of the parameters' sizes, four times the
        parameters' bytes in all: a stream-like bound on the host's memory bandwidth
        (counted as 3 arrays moved; the write's read for ownership is not counted)."""
        torch = self.torch
        total = sum(p.numel() for p in self.params)
        a, b, c = (torch.ones(total) for _ in range(3))
        steps = 4

        def triad():
            for _ in range(steps):
                torch.add(a, b, alpha=0.5, out=c)

        out = self.timed(triad, prepare=lambda: None)
        out["GB/s"] = round(steps * 3 * total * 4 / out["ms"] / 1e6, 1)
        return out

    def host_adam_under_copies(self, values_down: bool = True) -> dict:
        """The pageable update while a side stream moves OffloadAdam's volume (values and
        gradients down, values up; ``values_down=False``: the least any host update
        moves, gradients down and values up) between other pinned buffers and the
        device."""
        torch = self.torch
        self.next_gradients()               # the side stream's gradients
        optimizer, prepare = self.host_memory("pageable")
        down = [torch.empty(p.shape, pin_memory=True) for p in self.params]
        up = [torch.empty(p.shape, pin_memory=True) for p in self.params]
        side = torch.cuda.Stream()
        times, both, copies_first = [], [], 0
        for i in range(2 + self.steps):
            prepare()
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                for h, p in zip(down, self.params):
                    if values_down:
                        h.copy_(p.detach(), non_blocking=True)
                    h.copy_(p.grad, non_blocking=True)
                for h, p in zip(up, self.params):
                    p.detach().copy_(h, non_blocking=True)
                copied = torch.cuda.Event()
                copied.record(side)
            t0 = time.perf_counter()
            optimizer.step()
            updated = time.perf_counter()
            done_before = copied.query()
            torch.cuda.synchronize()
            if i >= 2:
                times.append((updated - t0) * 1e3)
                both.append((time.perf_counter() - t0) * 1e3)
                copies_first += done_before
        # both_ms: until the update and the copies are done, the least an overlapped
        # schedule moving these bytes can take; copies_done_first: steps where the copies
        # ended before the update did
        return {"ms": round(statistics.median(times), 3), "min_ms": round(min(times), 3),
                "both_ms": round(statistics.median(both), 3),
                "copies_done_first": f"{copies_first}/{len(both)}"}

    def host_adam_in_batches(self) -> dict:
        """OffloadAdam's host update over its own batches, every transfer left out: the
        pipeline's update cut into calls, on its buffers, with nothing else running."""
        from unified_opt.backends.torch.offload import OffloadAdam, _BatchCall

        optimizer = OffloadAdam(self.params, lr=1e-3)
        self.next_gradients()
        optimizer.step()
        batches = optimizer.pipeline.batches(list(enumerate(self.params)))
        states = [optimizer.state[p] for p in self.params]
        calls = [_BatchCall(batch, states, [0] * len(states), optimizer.param_groups)
                 for batch in batches]      # each batch's fused call, as a step makes it

        def update():
            for call in calls:
                call.run(optimizer.param_groups)

        out = self.timed(update, prepare=lambda: None)
        out["batches"] = len(batches)
        return out

    # -- the transfers -------------------------------------------------------------------
    def queue_downloads(self) -> dict:
        """Host milliseconds to queue every value's and gradient's download (no wait)."""
        torch = self.torch
        values = [torch.empty(p.shape, pin_memory=True) for p in self.params]
        grads = [torch.empty(p.shape, pin_memory=True) for p in self.params]
        side = torch.cuda.Stream()
        times = []
        for i in range(2 + self.steps):
            self.next_gradients()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.cuda.stream(side):
                for v, g, p in zip(values, grads, self.params):
                    v.copy_(p.detach(), non_blocking=True)
                    g.copy_(p.grad, non_blocking=True)
            queued = time.perf_counter()
            torch.cuda.synchronize()
            if i >= 2:
                times.append(((queued - t0) * 1e3, (time.perf_counter() - t0) * 1e3))
        return {"queue_ms": round(statistics.median(t for t, _ in times), 3),
                "ms": round(statistics.median(t for _, t in times), 3),
                "copies": 2 * len(self.params)}

    def layout(self) -> dict:
        """Host milliseconds a step spends laying out its pieces (``HostPipeline.batches``:
        the plan and the host views kept, the parameters' and gradients' views taken), for
        the ring and for buffers per parameter, and the first step's (plan made)."""
        from unified_opt.backends.torch.pipeline import HostPipeline
        from unified_opt.backends.torch.staging import HostStaging

        out = {}
        indexed = list(enumerate(self.params))
        for name, staging in (("ring", None), ("per_parameter", HostStaging())):
            pipeline = HostPipeline(split=True, stage_cpu=True, staging=staging)
            self.next_gradients()
            t0 = time.perf_counter()
            pipeline.batches(indexed)
            out[f"{name}_first_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            kept = self.timed(lambda: pipeline.batches(indexed))
            out[f"{name}_ms"] = kept["ms"]
        out["ms"] = out["ring_ms"]
        out["pieces"] = sum(len(b) for b in pipeline.batches(indexed))
        return out

    def pipeline_only(self) -> dict:
        from unified_opt.backends.torch.pipeline import HostPipeline

        pipeline = HostPipeline(split=True)
        out = self.timed(lambda: pipeline.run(self.params, lambda batch: None))
        out["batches"] = len(pipeline.batches(list(enumerate(self.params))))
        return out

    # -- OffloadAdam ---------------------------------------------------------------------
    def offload(self, staging="ring", slots=4, batch_elements=1 << 23,
                first_batch_elements=1 << 20, transfer="copy-engine") -> dict:
        """``OffloadAdam`` through ``staging`` (``"ring"`` of ``slots``, moving batches
        as ``transfer`` says, or ``"per-parameter"`` buffers) in batches of
        ``batch_elements``. Besides the step: the host's time in the update
        (``adam_ms``), queueing downloads and uploads, and waiting for downloads."""
        torch = self.torch
        from unified_opt.backends.torch.offload import OffloadAdam
        from unified_opt.backends.torch.pipeline import HostPipeline
        from unified_opt.backends.torch.staging import HostStaging, StagingRing

        optimizer = OffloadAdam(self.params, lr=1e-3)
        optimizer.pipeline = HostPipeline(
            split=True, stage_cpu=not self.cuda, batch_elements=batch_elements,
            first_batch_elements=first_batch_elements,
            staging=StagingRing(slots=slots, transfer=transfer) if staging == "ring"
            else HostStaging())
        self.next_gradients()
        optimizer.step()
        # the host's time in each part of the loop (wrappers on these instances)
        # (transfer="kernel" queues each batch's copies both ways in one transfer_queue,
        # transfer="table" its kernel too, TableMoves.launch;
        # adam_kernel: torch's fused kernel inside adam; first_wait: the wait for the
        # first batch, inside wait; tail: from step's return until the device is done
        # (the last uploads); other: the rest of the host's step, the loop's own Python)
        parts = {"adam": 0.0, "adam_kernel": 0.0, "download_queue": 0.0,
                 "upload_queue": 0.0, "transfer_queue": 0.0, "wait": 0.0,
                 "first_wait": 0.0, "tail": 0.0, "other": 0.0}

        def timed(name, call):
            def run(*args, **kwargs):
                t0 = time.perf_counter()
                result = call(*args, **kwargs)
                parts[name] += time.perf_counter() - t0
                return result
            return run

        def first_timed(call):
            def run(*args):
                t0 = time.perf_counter()
                result = call(*args)
                if not parts["wait"]:
                    parts["first_wait"] = time.perf_counter() - t0
                parts["wait"] += time.perf_counter() - t0
                return result
            return run

        pipeline = optimizer.pipeline
        run = pipeline.run      # the update the pipeline calls for each batch
        pipeline.run = lambda params, update: run(params, timed("adam", update))
        for name in ("upload", "download", "transfer"):
            setattr(pipeline, f"_{name}", timed(f"{name}_queue",
                                                getattr(pipeline, f"_{name}")))
        pipeline._wait = first_timed(pipeline._wait)
        per_step = []

        def step():
            parts.update(dict.fromkeys(parts, 0.0))
            t0 = time.perf_counter()
            optimizer.step()
            returned = time.perf_counter()
            self.sync()
            parts["tail"] = time.perf_counter() - returned
            parts["other"] = returned - t0 - sum(
                parts[k] for k in ("adam", "download_queue", "upload_queue",
                                   "transfer_queue", "wait"))
            per_step.append(dict(parts))

        from unified_opt.backends.torch.moves import TableMoves

        fused_adam, launch = torch._fused_adam_, TableMoves.launch
        torch._fused_adam_ = timed("adam_kernel", fused_adam)  # what offload.py calls
        TableMoves.launch = timed("transfer_queue", launch)
        try:
            out = self.timed(step)
        finally:
            torch._fused_adam_, TableMoves.launch = fused_adam, launch
        for name in parts:
            out[f"{name}_ms"] = round(statistics.median(s[name] for s in per_step[2:]) * 1e3,
                                      3)
        out["staging_bytes"] = sum(b.numel() * b.element_size()    # pinned on CUDA
                                   for b in optimizer.pipeline.staging.pinned())
        out["batches"] = len(optimizer.pipeline.batches(list(enumerate(self.params))))
        out["device_state_bytes"] = sum(
            v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
            if isinstance(v, torch.Tensor) and v.device.type != "cpu")
        return out

    def zero_copy_adam(self) -> dict:
        """The GPU's fused Adam with both moments in pinned host memory, read and written
        in place over the bus (a CUDA view of the mapped host pages): 0 bytes of moments
        on the GPU, the update computed by the GPU. Not what ``OffloadAdam`` computes."""
        torch = self.torch
        from torch.optim import adam as torch_adam

        def on_device(host):
            """A CUDA tensor over ``host``'s pinned pages (unified addressing: the
            device sees them at the host's address)."""
            class Mapped:
                __cuda_array_interface__ = {
                    "shape": tuple(host.shape), "typestr": "<f4", "strides": None,
                    "data": (host.data_ptr(), False), "version": 3, "stream": None}
            return torch.as_tensor(Mapped(), device=self.device)

        hosts = [[torch.zeros(p.shape, pin_memory=True) for p in self.params]
                 for _ in range(2)]
        exp_avgs, exp_avg_sqs = ([on_device(h) for h in moments] for moments in hosts)
        steps = [torch.zeros((), device=self.device) for _ in self.params]

        def step():
            torch_adam.adam([p.detach() for p in self.params], [p.grad for p in self.params],
                            exp_avgs, exp_avg_sqs, [], steps, fused=True, amsgrad=False,
                            beta1=0.9, beta2=0.999, lr=1e-3, weight_decay=0.0, eps=1e-8,
                            maximize=False)

        self.next_gradients()
        step()
        self.sync()
        # the first step's first moment, read on the host: (1 - beta1) * g
        first = self.params[0].grad.cpu() * 0.1
        written = torch.allclose(hosts[0][0], first, rtol=1e-5, atol=0.0)
        out = self.timed(step)
        out["moments_on_host"] = written
        out["device_state_bytes"] = sum(t.numel() * t.element_size() for t in steps)
        return out


def rows(probe: Probe) -> list[tuple[str, str, object]]:
    cuda = probe.cuda
    out = [("host/to-cpu", "host Adam, memory from .to('cpu') (gpu_step_time's row)",
            lambda: probe.host_adam("to-cpu")),
           ("host/pageable", "host Adam, pageable memory touched by the thread pool",
            lambda: probe.host_adam("pageable")),
           ("host/triad", "c = a + s * b four times over the parameters' size (GB/s: "
            "the host's memory bandwidth)", probe.host_triad),
           ("host/in-batches", "OffloadAdam's host update in its batches, no transfers",
            probe.host_adam_in_batches),
           ("host/layout", "HostPipeline.batches: a step's pieces laid out (ring_ms, "
            "per_parameter_ms; *_first_ms: the plan made)", probe.layout)]
    if cuda:
        out += [("host/under-copies", "host Adam (pageable) while OffloadAdam's copies run "
                 "on a side stream", probe.host_adam_under_copies),
                ("host/under-least-copies", "host Adam (pageable) while gradients go down "
                 "and values up on a side stream (no values down)",
                 lambda: probe.host_adam_under_copies(values_down=False)),
                ("copies/queue-downloads", "queue every value's and gradient's download "
                 "(queue_ms: host time)", probe.queue_downloads),
                ("copies/pipeline-only", "HostPipeline with an empty update",
                 probe.pipeline_only)]
    out += [("offload/ring", "OffloadAdam through 4 ring slots, batches of 2**23 (the "
             "default before 2026-11-26)",
             lambda: probe.offload()),
            ("offload/per-parameter", "OffloadAdam through a buffer per parameter "
             "(before)", lambda: probe.offload(staging="per-parameter")),
            ("offload/ring-8-slots", "OffloadAdam through 8 ring slots, batches of 2**23",
             lambda: probe.offload(slots=8)),
            ("offload/ring-2M", "OffloadAdam through 4 ring slots, batches of 2**21 "
             "(16 MiB a slot)", lambda: probe.offload(batch_elements=1 << 21,
                                                      first_batch_elements=1 << 19)),
            ("offload/ring-1M", "OffloadAdam through 4 ring slots, batches of 2**20 "
             "(8 MiB a slot)", lambda: probe.offload(batch_elements=1 << 20,
                                                     first_batch_elements=1 << 18))]
    if cuda:    # a kernel per batch, both ways, through the slots' device mapping
        out += [("offload/ring-kernel", "OffloadAdam through 4 ring slots, batches of "
                 "2**23, transfer='kernel'", lambda: probe.offload(transfer="kernel")),
                ("offload/ring-kernel-2M", "OffloadAdam through 4 ring slots, batches of "
                 "2**21, transfer='kernel' (OffloadAdam's default now)",
                 lambda: probe.offload(batch_elements=1 << 21, first_batch_elements=1 << 19,
                                       transfer="kernel")),
                ("offload/ring-table-2M", "OffloadAdam through 4 ring slots, batches of "
                 "2**21, transfer='table' (a Triton kernel a batch over an address "
                 "table)", lambda: probe.offload(batch_elements=1 << 21,
                                                 first_batch_elements=1 << 19,
                                                 transfer="table")),
                ("offload/ring-table-4M", "OffloadAdam through 4 ring slots, batches of "
                 "2**22, transfer='table'",
                 lambda: probe.offload(batch_elements=1 << 22, first_batch_elements=1 << 20,
                                       transfer="table")),
                ("offload/ring-kernel-1M", "OffloadAdam through 4 ring slots, batches of "
                 "2**20, transfer='kernel'",
                 lambda: probe.offload(batch_elements=1 << 20, first_batch_elements=1 << 18,
                                       transfer="kernel")),
                ("offload/ring-kernel-512K", "OffloadAdam through 4 ring slots, batches of "
                 "2**19, transfer='kernel' (4 MiB a slot: in the host's cache)",
                 lambda: probe.offload(batch_elements=1 << 19, first_batch_elements=1 << 17,
                                       transfer="kernel")),
                ("offload/ring-kernel-8-slots", "OffloadAdam through 8 ring slots, batches "
                 "of 2**22, transfer='kernel'",
                 lambda: probe.offload(slots=8, batch_elements=1 << 22, transfer="kernel"))]
    if cuda:
        out.append(("gpu/zero-copy-adam", "the GPU's fused Adam, moments in mapped host "
                    "memory (not OffloadAdam's math: a design to compare)",
                    probe.zero_copy_adam))
    return out


def markdown(report: dict) -> str:
    lines = [f"# OffloadAdam's parts on {report['gpu']}", "",
             f"torch {report['torch']}; {report['threads']} host threads; host: "
             f"{json.dumps(report['host'])}. Parameters: {report['tensors']} tensors, "
             f"{report['elements']:,} elements. Median ms over {report['steps']} steps; × is "
             "to `host/to-cpu` in the same run.", "",
             "| row | what | ms | × host Adam | other |", "|---|---|---|---|---|"]
    base = next((r.get("ms") for r in report["rows"] if r["key"] == "host/to-cpu"), None)
    for r in report["rows"]:
        ratio = f"{r['ms'] / base:.3f}" if base and "ms" in r else ""
        other = {k: v for k, v in r.items() if k not in ("key", "what", "ms")}
        lines.append(f"| `{r['key']}` | {r['what']} | {r.get('ms', '')} | {ratio} | "
                     f"{json.dumps(other)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rows", default="", help="comma-separated row keys (all if empty)")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("offload_probe: CUDA is not available here; nothing measured")
        return 0
    shapes = gpt2_shapes(**TINY) if args.tiny else gpt2_shapes()
    probe = Probe(torch, args.device, shapes, args.steps)
    report = {"gpu": torch.cuda.get_device_name() if probe.cuda else "no GPU (dry run)",
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "host": host_facts(), "tensors": len(shapes),
              "elements": sum(p.numel() for p in probe.params), "steps": args.steps,
              "rows": []}
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = {k for k in args.rows.split(",") if k}
    for key, what, run in rows(probe):
        if wanted and key not in wanted:
            continue
        started = time.perf_counter()
        try:
            result = run()
        except Exception as error:      # recorded; the other rows still run
            result = {"error": f"{type(error).__name__}: {error}"}
        result["seconds"] = round(time.perf_counter() - started, 1)
        probe.release()     # the row's host and device memory, before the next row
        report["rows"].append({"key": key, "what": what, **result})
        print(key, json.dumps(result), flush=True)
        write_text(args.out / "offload_probe.json", json.dumps(report, indent=1) + "\n")
        write_text(args.out / "offload_probe.md", markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
