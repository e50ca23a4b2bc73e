"""Traffic of DGC momentum's exchange (``uo.exchange_stats``) against a dense all-reduce
of the same gradients, on torch ranks (torchrun, gloo, CPU).

    python benchmarks/dgc_traffic.py [--ranks 2] [--out benchmarks/results]

One 4096x1024 float32 parameter (4M elements), random gradients, 2 ranks:

* Paddle's ramp (``sparsity=[0.75, 0.9375, 0.984375, 0.996, 0.999]``, ``rampup_step=100``,
  from step 1): the bytes a rank sent per step at each stage, as a fraction of the dense
  bytes (indices, values, the count and the padding to the largest rank all counted);
* the default sparsity 0.999 from step 1: the same fraction; the DGC paper's low end is
  1/270;
* the median step time of the DGC optimizer against ``torch.optim.SGD(momentum=0.9)``
  after a dense ``all_reduce`` of the gradient (what DDP would do), in the same run.

Writes ``OUT/dgc_traffic.json`` and ``OUT/dgc_traffic.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from unified_opt.files import write_text

RAMP = [0.75, 0.9375, 0.984375, 0.996, 0.999]
SHAPE = (4096, 1024)


def rank_main(out: str) -> None:
    import torch
    import torch.distributed as dist

    import unified_opt as uo

    dist.init_process_group("gloo")
    rank, results = dist.get_rank(), {}
    runs = {"ramp": uo.DGCMomentum(lr=0.01, rampup_begin_step=0, rampup_step=100,
                                   sparsity=RAMP),
            "default": uo.DGCMomentum(lr=0.01)}
    for name, spec in runs.items():
        torch.manual_seed(rank)
        p = torch.nn.Parameter(torch.zeros(SHAPE))
        optimizer = uo.build(spec, [("w", p)])
        steps = 100 if name == "ramp" else 20
        per_step, before, times = [], uo.exchange_stats(optimizer), []
        for t in range(steps):
            p.grad = torch.randn(SHAPE)
            start = time.perf_counter()
            optimizer.step()
            times.append(time.perf_counter() - start)
            now = uo.exchange_stats(optimizer)
            per_step.append({"sparsity": spec.sparsity_at(t + 1),
                             "sent": now["bytes_sent"] - before["bytes_sent"],
                             "dense": now["dense_bytes"] - before["dense_bytes"]})
            before = now
        results[name] = {"steps": per_step, "ms": 1e3 * statistics.median(times)}
    p = torch.nn.Parameter(torch.zeros(SHAPE))
    dense = torch.optim.SGD([p], lr=0.01, momentum=0.9)
    times = []
    for _ in range(20):
        p.grad = torch.randn(SHAPE)
        start = time.perf_counter()
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
        dense.step()
        times.append(time.perf_counter() - start)
    results["dense_sgd_allreduce_ms"] = 1e3 * statistics.median(times)
    if rank == 0:
        write_text(Path(out), json.dumps(results))
    dist.destroy_process_group()


def _table(results: dict, ranks: int) -> str:
    stages = {}
    for step in results["ramp"]["steps"]:
        stages.setdefault(step["sparsity"], []).append(step["sent"] / step["dense"])
    lines = [f"# DGC traffic, torch, {ranks} ranks (gloo, CPU), one 4096x1024 float32 "
             "parameter", "",
             "| run | sparsity | bytes sent / dense bytes (per step) | 1 / that |",
             "|---|---|---|---|"]
    for sparsity, ratios in stages.items():
        ratio = statistics.median(ratios)
        lines.append(f"| Paddle's ramp | {sparsity} | {ratio:.3g} | {1 / ratio:.0f} |")
    ratios = [s["sent"] / s["dense"] for s in results["default"]["steps"]]
    ratio = statistics.median(ratios)
    lines.append(f"| default | 0.999 | {ratio:.3g} | {1 / ratio:.0f} |")
    lines += ["", "| step (median, ms) | DGC, sparsity 0.999 | SGD momentum after a dense "
              "all_reduce |", "|---|---|---|",
              f"| 4096x1024 | {results['default']['ms']:.1f} | "
              f"{results['dense_sgd_allreduce_ms']:.1f} |", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--rank-output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_output:
        rank_main(args.rank_output)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        raw = Path(directory) / "raw.json"
        env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
        subprocess.run([sys.executable, "-m", "torch.distributed.run",
                        f"--nproc_per_node={args.ranks}", f"--master_port={port}", __file__,
                        "--rank-output", str(raw)], check=True, env=env)
        results = json.loads(raw.read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "dgc_traffic.json", json.dumps(results, indent=1) + "\n")
    table = _table(results, args.ranks)
    write_text(out / "dgc_traffic.md", table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
