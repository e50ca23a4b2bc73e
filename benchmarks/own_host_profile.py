"""Where the own CUDA step's host time goes: ``cProfile`` of the step of torch's own
optimizer (``compile=True``: the Triton kernels) on the GPT-2-small set.

``gpu_step_time.py``'s ``host ms`` column says how long a step takes to return; where the
own path's is larger than ``torch.optim.AdamW(fused=True)``'s, this says which Python
calls take it. Per algorithm: the median host and step milliseconds, then the functions
with the most time of their own and the most time below them.

    python benchmarks/own_host_profile.py --out DIR [--algorithms adamw,lamb]

Without CUDA it says so and exits 0, unless ``--device cpu`` asks for a dry run (Triton's
interpreter over a tiny set of CPU tensors: set ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_step_time import ALGORITHMS, TINY, gpt2_shapes  # noqa: E402

from unified_opt.files import write_text


def profile(algorithm: str, device: str, shapes, steps: int) -> str:
    import torch

    import unified_opt as uo
    from unified_opt.expressions import parse_spec

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device=device) * 0.02) for s in shapes]
    grads = [torch.randn_like(p) for p in params]
    for p, g in zip(params, grads):
        p.grad = g
    optimizer = uo.build(parse_spec(ALGORITHMS[algorithm]), params, path="own",
                         options={"compile": True})

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(5):
        optimizer.step()
    host, total = [], []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        optimizer.step()
        returned = time.perf_counter()
        sync()
        host.append((returned - t0) * 1e3)
        total.append((time.perf_counter() - t0) * 1e3)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        optimizer.step()
    profiler.disable()
    sync()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    text.write(f"## {algorithm}: host {statistics.median(host):.3f} ms, step "
               f"{statistics.median(total):.3f} ms (medians of {steps}); "
               f"profile of {steps} steps\n\n")
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(30)
    return relative_paths(text.getvalue())


def relative_paths(text: str) -> str:
    """``text`` with the machine's folders left out of its file names: this checkout's
    files from its root, installed packages from ``site-packages/``."""
    root = Path(__file__).resolve().parent.parent
    text = text.replace(f"{root}/", "").replace(f"{root.resolve()}/", "")
    return re.sub(r"\S*/site-packages/", "site-packages/", text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--algorithms", default="adamw,lion,lamb,came")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    import torch

    if args.device == "cpu" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        # without the interpreter the CPU's own step is the kernel VM's, not this engine's
        print("own_host_profile: --device cpu profiles the CUDA engine under Triton's "
              "interpreter: set TRITON_INTERPRET=1", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("own_host_profile: CUDA is not available here; nothing measured "
              "(--device cpu with TRITON_INTERPRET=1 runs it on the CPU)")
        return 0
    shapes = gpt2_shapes() if args.device == "cuda" else gpt2_shapes(**TINY)
    args.out.mkdir(parents=True, exist_ok=True)
    parts = [profile(name, args.device, shapes, args.steps)
             for name in args.algorithms.split(",")]
    write_text(args.out / "own_host_profile.txt", "\n\n".join(parts))
    print("\n".join(part.splitlines()[0] for part in parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
