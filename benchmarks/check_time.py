"""How long ``unified-opt check`` takes to answer (issue 40, "Speed"): a passing and a
failing check of three algorithms against the peers' classes, each in a fresh process,
as a user's command line runs it.

    python benchmarks/check_time.py [--rows adamw_pass,came_fail,...] [--repeats 1]
                                    [--out benchmarks/results] [--source DIR]
                                    [--label TEXT]

Each row runs ``uo.conformance.check(factory, spec, backend="torch")`` in a new Python
process (the float64 oracle, the floors and the explainer's variants computed from
nothing, as in a CI job) and records: the process's wall time from its start to the
answer (Python start, imports of torch, unified-opt and the peer, the check),
``check_s`` (the ``check`` call alone), the process's CPU seconds (user + system,
which a loaded machine inflates far less than wall time), the verdict and its first
line. The targets are wall times of the whole process on two cores: a passing check
answers in <= 15 s, a failing one in <= 30 s. Other work on the machine slows every
row: the load average (1 min) is recorded before and after each, and the figures are
those of the machine as it was.

``--source DIR``: run the rows on another copy of the project (e.g. ``git archive`` of
an older commit unpacked there, with ``unified_opt/conformance`` and
``unified_opt/backends`` linked to its ``conformance`` and ``backends``), for a before
and after; the results files then get ``_<name of DIR>`` in their names, and
``--label`` says in them what DIR holds.

Writes ``OUT/check_time.json`` and ``OUT/check_time.md`` atomically
(:mod:`unified_opt.files`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

PASS_TARGET_S = 15.0
FAIL_TARGET_S = 30.0

#: name -> (peer module, what it checks, expected verdict); the factories and specs are
#: in :func:`_row`, which the child process runs
ROWS = {
    "adamw_pass": ("torch", "torch.optim.AdamW against adamw(lr=0.01, eps=1e-3, "
                   "weight_decay=0.1)", True),
    "adamw_fail": ("torch", "torch.optim.AdamW with betas=(0.9, 0.99) against the same "
                   "spec (betas (0.9, 0.999)): no known variant matches", False),
    "adamw_fail_explained": ("torch", "torch.optim.AdamW with amsgrad=True against the same "
                             "spec: amsgrad=True named", False),
    "lamb_pass": ("torch_optimizer", "torch_optimizer.Lamb(lr=0.01, weight_decay=0.05, "
                  "clamp_value=3.0) against its spec (nonfinite=False: it divides by a NaN "
                  "norm where the spec's ratio is 1)", True),
    "lamb_fail": ("torch_optimizer", "torch_optimizer.Lamb as in lamb_pass with betas=(0.9, "
                  "0.99) against the same spec (betas (0.9, 0.999)), every stream: no known "
                  "variant matches", False),
    "lamb_fail_explained": ("pytorch_optimizer", "pytorch_optimizer.Lamb(lr=0.01) against "
                            "lamb(lr=0.01, trust_eps=1e-6, eps=1e-6, weight_norm_clamp=10.0, "
                            "always_adapt=True): its bias correction named (since 9b4bd36)",
                            False),
    "came_pass": ("came_pytorch", "came_pytorch.CAME against came(lr=0.01, weight_decay=0.1), "
                  "its factored state mapped", True),
    "came_fail": ("came_pytorch", "came_pytorch.CAME with betas=(0.9, 0.99, 0.9999) against "
                  "the same spec: no known variant matches", False),
}


def _row(name: str):
    """``(factory, spec, check keywords)`` of row ``name`` (in the child process)."""
    import torch

    import unified_opt as uo

    adamw = uo.AdamW(lr=0.01, eps=1e-3, weight_decay=0.1)
    came = uo.CAME(lr=0.01, weight_decay=0.1)
    if name.startswith("adamw"):
        extra = {"adamw_fail": {"betas": (0.9, 0.99)},
                 "adamw_fail_explained": {"amsgrad": True}}.get(name, {})
        return (lambda p: torch.optim.AdamW(p, lr=0.01, eps=1e-3, weight_decay=0.1,
                                            **extra)), adamw, {}
    torch_optimizer_lamb = uo.Lamb(lr=0.01, weight_decay=0.05, weight_norm_clamp=3.0,
                                   always_adapt=True, bias_correction="none")
    if name in ("lamb_pass", "lamb_fail"):
        import torch_optimizer

        betas = {"betas": (0.9, 0.99)} if name == "lamb_fail" else {}
        return (lambda p: torch_optimizer.Lamb(p, lr=0.01, weight_decay=0.05, clamp_value=3.0,
                                               **betas)), torch_optimizer_lamb, \
            {"nonfinite": name == "lamb_fail"}
    if name == "lamb_fail_explained":
        import pytorch_optimizer

        spec = uo.Lamb(lr=0.01, weight_decay=0.0, trust_eps=1e-6, eps=1e-6,
                       weight_norm_clamp=10.0, always_adapt=True)
        return (lambda p: pytorch_optimizer.Lamb(p, lr=0.01)), spec, {}
    import came_pytorch

    betas = {"came_fail": {"betas": (0.9, 0.99, 0.9999)}}.get(name, {})
    return (lambda p: came_pytorch.CAME(p, lr=0.01, weight_decay=0.1, **betas)), came, {}


def child(name: str) -> None:
    """Run row ``name`` and print its figures as one JSON line."""
    imported = time.perf_counter()
    from unified_opt.conformance.checker import check

    factory, spec, keywords = _row(name)
    imports_s = time.perf_counter() - imported
    started = time.perf_counter()
    result = check(factory, spec, backend="torch", **keywords)
    check_s = time.perf_counter() - started
    print(json.dumps({"check_s": round(check_s, 2), "imports_s": round(imports_s, 2),
                      "passed": result.passed, "streams": result.report["summary"]["total"],
                      "answer": str(result).splitlines()}))


def measure(name: str, source: Path | None) -> dict:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
    before_load = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True,
                          text=True, env=env, cwd=source or Path(__file__).parent.parent)
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"row {name} failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime -
                                                         cpu_before.ru_stime)
    target = PASS_TARGET_S if ROWS[name][2] else FAIL_TARGET_S
    return {"row": name, "checks": ROWS[name][1], "expected_pass": ROWS[name][2],
            **figures, "process_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "target_s": target, "met": wall <= target,
            "load_before": round(before_load, 2), "load_after": round(os.getloadavg()[0], 2)}


def markdown(result: dict) -> str:
    lines = ["# Time for `unified-opt check` to answer (issue 40)", "",
             f"Machine: {result['machine']}; {result['cpus']} CPUs; Python {result['python']}; "
             f"source: `{result['source']}`; {result['created']}.", "",
             f"Targets (wall time of the whole process, Python start to answer, on two "
             f"cores): a passing check <= {PASS_TARGET_S:g} s, a failing one <= "
             f"{FAIL_TARGET_S:g} s. Each row is a fresh process: nothing kept from an earlier "
             "check. The load average (1 min) before and after each row says how busy the "
             "machine was (other work ran beside it); CPU seconds are the process's user + "
             "system time.", "",
             "| row | verdict | process s | check s | imports s | CPU s | target s | met | "
             "load before / after | checks |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        verdict = "PASS" if r["passed"] else "FAIL"
        lines.append(f"| `{r['row']}` | {verdict} | {r['process_s']} | {r['check_s']} | "
                     f"{r['imports_s']} | {r['cpu_s']} | {r['target_s']:g} | "
                     f"{'met' if r['met'] else 'missed'} | {r['load_before']} / "
                     f"{r['load_after']} | {r['checks']} |")
    lines += ["", "What each check answered (first lines):", ""]
    for r in result["rows"]:
        lines += [f"* `{r['row']}`:", "", "  ```"] + [f"  {line}" for line in r["answer"]] + \
            ["  ```", ""]
    lines.append(f"Command: `{result['command']}`")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--label", default=None,
                        help="what --source is (e.g. 'git archive of 19db3a2'), for the results")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return 0
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"--rows: unknown {unknown}; rows: {', '.join(ROWS)}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    from unified_opt.files import write_text

    source = None if args.source is None else args.source.resolve()
    suffix = "" if source is None else f"_{source.name}"
    result = {"machine": platform.platform(), "cpus": os.cpu_count(),
              "python": sys.version.split()[0],
              "source": args.label or ("this checkout" if source is None else str(source)),
              "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "command": " ".join(["python", "benchmarks/check_time.py", *(argv or sys.argv[1:])]),
              "pass_target_s": PASS_TARGET_S, "fail_target_s": FAIL_TARGET_S, "rows": []}
    args.out.mkdir(parents=True, exist_ok=True)
    for _ in range(args.repeats):
        for name in rows:
            row = measure(name, source)
            result["rows"].append(row)
            print(f"{name}: {'PASS' if row['passed'] else 'FAIL'} process {row['process_s']} s "
                  f"(check {row['check_s']} s, CPU {row['cpu_s']} s), load "
                  f"{row['load_before']} -> {row['load_after']}", flush=True)
            # written after every row: a run stopped half-way keeps what it measured
            write_text(args.out / f"check_time{suffix}.json", json.dumps(result, indent=1) + "\n")
            write_text(args.out / f"check_time{suffix}.md", markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
