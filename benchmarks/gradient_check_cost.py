"""Per-step cost of checking every gradient against its parameter (issue 41, points 2,
3 and 6): :func:`unified_opt.step_loop.check_gradients` with each backend's
``describe`` over ``--params`` parameters.

    python benchmarks/gradient_check_cost.py [--params 150] [--repeats 2000]
                                             [--out benchmarks/results]

Each framework runs in a process of its own (one framework per process). Its
``--params`` float32 parameters are small (shapes cycle through [64], [64, 64],
[4, 16, 8]: the check reads shapes, not elements) with gradients of their shapes. The
figure is the median over ``--repeats`` runs of the whole check (every parameter and
gradient described and compared), in microseconds, and per parameter. For scale, the
row also gives the median of one step of a plain SGD over the same parameters
(torch: ``torch.optim.SGD(foreach=False)``; Paddle: ``paddle.optimizer.SGD``; MindSpore:
``nn.SGD`` in PyNative), which includes the check's cost on no framework (the native
classes are called directly, not through ``uo.build``). Writes
``OUT/gradient_check_cost.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

FRAMEWORKS = ("torch", "paddle", "mindspore")
SHAPES = ([64], [64, 64], [4, 16, 8])


def _median_us(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def measure(framework: str, count: int, repeats: int) -> dict:
    import numpy as np

    from unified_opt.step_loop import check_gradients

    shapes = [SHAPES[i % len(SHAPES)] for i in range(count)]
    names = [f"layer{i}.weight" for i in range(count)]
    if framework == "torch":
        import torch

        from unified_opt.backends.torch.steps import describe
        params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        grads = [torch.full(s, 0.5) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = g
        sgd = torch.optim.SGD(params, lr=1e-3, foreach=False)
        step = sgd.step
    elif framework == "paddle":
        import paddle

        from unified_opt.backends.paddle.native import describe
        layers = [paddle.create_parameter(s, "float32") for s in shapes]
        for p in layers:
            (p * 0.5).sum().backward()
        params = layers
        grads = [p._grad_ivar() for p in params]
        sgd = paddle.optimizer.SGD(learning_rate=1e-3, parameters=params)
        step = sgd.step
    else:
        import mindspore as ms
        from mindspore import Parameter, Tensor, nn

        from unified_opt.backends.mindspore.native import describe
        ms.set_context(mode=ms.PYNATIVE_MODE)
        params = [Parameter(Tensor(np.zeros(s, np.float32)), name=n)
                  for s, n in zip(shapes, names)]
        grads = tuple(Tensor(np.full(s, 0.5, np.float32)) for s in shapes)
        sgd = nn.SGD(params, learning_rate=1e-3)

        def step():
            sgd(grads)
    check = lambda: check_gradients("bench", names, params, grads, describe)  # noqa: E731
    check()
    step()
    check_us = _median_us(check, repeats)
    step_us = _median_us(step, max(repeats // 20, 20))
    return {"framework": framework, "params": count, "check_us": round(check_us, 1),
            "check_us_per_param": round(check_us / count, 3),
            "plain_sgd_step_us": round(step_us, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.params < 1 or args.repeats < 1:
        raise ValueError(f"--params and --repeats must be >= 1, got {args.params}, "
                         f"{args.repeats}")
    if args.measure:
        print(json.dumps(measure(args.measure, args.params, args.repeats)))
        return
    rows = []
    for framework in FRAMEWORKS:
        done = subprocess.run([sys.executable, __file__, "--measure", framework,
                               "--params", str(args.params), "--repeats", str(args.repeats)],
                              capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    from unified_opt.files import write_text

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"machine": platform.processor() or platform.machine(),
              "python": platform.python_version(), "rows": rows}
    write_text(out / "gradient_check_cost.json", json.dumps(result, indent=2) + "\n")
    lines = ["# Gradient check cost per step", "",
             f"{args.params} float32 parameters, median of {args.repeats} checks "
             "(`python benchmarks/gradient_check_cost.py`).", "",
             "| framework | check (us) | per parameter (us) | plain SGD step (us) |",
             "|---|---|---|---|"]
    lines += [f"| {r['framework']} | {r['check_us']} | {r['check_us_per_param']} | "
              f"{r['plain_sgd_step_us']} |" for r in rows]
    write_text(out / "gradient_check_cost.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
