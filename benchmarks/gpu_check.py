"""The GPU acceptance run in one command (issue 20): on a CUDA machine, within a time
budget, with its results written to ``--out`` and into ``benchmarks/results``.

1. ``benchmarks/gpu_step_time.py`` alone on the machine (timings), with an empty Triton
   cache so that the first step's seconds include compiling; then the first step of
   the own CAME again in a new process (the compiled kernels reused from the cache);
   then ``benchmarks/offload_probe.py`` (where the offload's step time goes);
2. then, side by side: ``unified-opt conformance --device cuda --backends torch`` in
   shards of algorithms (the suite's Triton kernels compile in parallel on the
   machine's cores; the shards together are the whole suite) and the CUDA tests.

Writes ``OUT/environment.json``, ``OUT/gpu_step_time.{json,md}``,
``OUT/offload_probe.{json,md}``, ``OUT/conformance.{json,md}`` (every shard's counts and
each result that did not pass), ``OUT/cuda_tests.txt`` and ``OUT/gpu_check.log``; exit
status 0 when the conformance shards and the tests passed. Without CUDA it says so and
exits 0, unless ``--device cpu`` asks for a dry run of the whole sequence on the CPU
(about 2 minutes with ``--algorithms sgd``: the way to try the script before a device
run).

    python benchmarks/gpu_check.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from unified_opt.files import write_text

ROOT = Path(__file__).resolve().parent.parent
CUDA_TESTS = ["tests/test_cuda_engine.py", "tests/test_cuda_native.py",
              "tests/test_cuda_offload.py", "tests/test_device_option.py",
              "tests/test_torch.py::test_on_cuda_device_memory_holds_no_optimizer_state"]
#: conformance shards: algorithms grouped so each shard's kernels and cases weigh about
#: the same (the factored ones compile the most phases); :func:`conformance_shards` adds
#: a shard of the registered algorithms none of these lists: the shards are the suite
SHARDS = [["came", "sgd", "rprop"], ["adafactor", "adam", "adagrad"],
          ["lamb", "lars", "adamw", "adamax"], ["lion", "nadam", "radam", "rmsprop",
                                                "adadelta", "adam_offload", "dgc_momentum"]]


def conformance_shards() -> list[list[str]]:
    """:data:`SHARDS` and a last shard of every other registered algorithm (Muon, Adan,
    AdEMAMix, the schedule-free ones, ASGD, FTRL, ProximalAdagrad)."""
    import unified_opt as uo

    listed = {a for shard in SHARDS for a in shard}
    rest = [a for a in uo.algorithms() if a not in listed]
    return [list(shard) for shard in SHARDS] + ([rest] if rest else [])


FIRST_STEP = """
import time, torch, unified_opt as uo
torch.manual_seed(0)
shapes = [(50257, 768), (768, 3072), (3072, 768), (768,)]
params = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02) for s in shapes]
for p in params:
    p.grad = torch.randn_like(p)
started = time.perf_counter()
opt = uo.build(uo.CAME(), params, path="own")
opt.step()
torch.cuda.synchronize()
print(round(time.perf_counter() - started, 3))
"""


def log(out: Path, text: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {text}"
    print(line, flush=True)
    with open(out / "gpu_check.log", "a") as f:
        f.write(line + "\n")


def run(out: Path, command: list[str], timeout: float, env=None, **kwargs):
    """Run ``command`` (its output into the log); the CompletedProcess, or None on a
    timeout (then it was killed)."""
    log(out, "$ " + " ".join(command))
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as expired:
        log(out, f"timed out after {timeout:.0f} s; its output:\n"
                 f"{(expired.stdout or b'')[-4000:]!s}")
        return None
    with open(out / "gpu_check.log", "a") as f:
        f.write(done.stdout[-20000:] + done.stderr[-20000:] + "\n")
    log(out, f"exit {done.returncode}")
    return done


def environment(device: str) -> dict:
    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__,
            "cuda": torch.version.cuda, "device": device}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory
                                       / 2**30, 1)
    info["cpu_count"] = os.cpu_count()
    return info


def summarize(shard_dirs: list[Path]) -> dict:
    """Counts over the shards' reports, and every result that did not pass."""
    total = {"total": 0, "pass": 0, "fail": 0, "error": 0, "not_run": 0}
    failures, shards = [], []
    for folder in shard_dirs:
        path = folder / "report.json"
        if not path.exists():
            shards.append({"shard": folder.name, "report": None})
            continue
        report = json.loads(path.read_text())
        summary = report["summary"]
        not_run = sum(len(b.get("not_run") or []) for b in report["backends"].values())
        for key in ("total", "pass", "fail", "error"):
            total[key] += summary.get(key, 0)
        total["not_run"] += not_run
        shards.append({"shard": folder.name, **summary, "not_run": not_run,
                       "device_name": [b.get("device_name")
                                       for b in report["backends"].values()]})
        for result in report["results"]:
            if result["status"] != "pass":
                comparison = result.get("comparison") or {}
                explanation = result.get("explanation") or {}
                failures.append({
                    "case": result["case"], "path": result["path"],
                    "status": result["status"],
                    "detail": comparison.get("detail"),
                    "worst_ratio": comparison.get("worst_ratio"),
                    "explanation": explanation.get("text") if isinstance(explanation, dict)
                    else explanation,
                    "error": (result.get("error") or "")[-1500:]})
    return {"counts": total, "shards": shards, "failures": failures}


def conformance_markdown(summary: dict, info: dict) -> str:
    counts = summary["counts"]
    lines = [f"# Conformance on {info.get('gpu') or info['device']}", "",
             f"torch {info['torch']}, triton {info['triton']}, "
             f"`unified-opt conformance --device {info['device']} --backends torch` in "
             f"{len(summary['shards'])} shards of algorithms.", "",
             f"**{counts['pass']} of {counts['total']} pass**, {counts['fail']} fail, "
             f"{counts['error']} error; {counts['not_run']} not run (distributed cases "
             "run on the CPU only).", "", "| shard | total | pass | fail | error |",
             "|---|---|---|---|---|"]
    for shard in summary["shards"]:
        lines.append(f"| {shard['shard']} | {shard.get('total', '-')} | "
                     f"{shard.get('pass', '-')} | {shard.get('fail', '-')} | "
                     f"{shard.get('error', '-')} |")
    for failure in summary["failures"]:
        lines += ["", f"- `{failure['case']}` ({failure['path']}): {failure['status']}: "
                      f"{failure['detail'] or ''} {failure['explanation'] or ''}",
                  f"  {failure['error'][-400:]}" if failure["error"] else ""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: a dry run of the sequence on the CPU")
    parser.add_argument("--bench-budget-s", type=float, default=170.0)
    parser.add_argument("--part-timeout-s", type=float, default=240.0,
                        help="the most each part (benchmark; conformance and tests) takes")
    parser.add_argument("--algorithms", default="",
                        help="comma-separated: only these (a dry run's subset)")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); "
              "nothing run")
        return 0
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    info = environment(args.device)
    write_text(out / "environment.json", json.dumps(info, indent=1))
    log(out, f"environment: {info}")
    work = Path(tempfile.mkdtemp(prefix="uo-gpu-check-"))
    env = dict(os.environ, TRITON_CACHE_DIR=str(work / "triton"),
               UNIFIED_OPT_CACHE=str(work / "kernels"), PYTHONUNBUFFERED="1")
    python = sys.executable

    # 1. the benchmark alone, cold caches; then a later process's first step
    bench_out = work / "bench"
    run(out, [python, "benchmarks/gpu_step_time.py", "--engines", "auto,true",
              "--budget-s", str(args.bench_budget_s), "--out", str(bench_out)]
        + (["--device", "cpu", "--tiny"] if args.device == "cpu" else []),
        args.part_timeout_s, env=env)
    for name in ("gpu_step_time.json", "gpu_step_time.md"):
        if (bench_out / name).exists():
            shutil.copy(bench_out / name, out / name)
    if args.device == "cuda":
        again = run(out, [python, "-c", FIRST_STEP], 120, env=env)
        if again is not None and again.returncode == 0:
            info["came_first_step_s_warm_cache"] = float(again.stdout.split()[-1])
            write_text(out / "environment.json", json.dumps(info, indent=1))
    # where the offload's step time goes, still alone on the machine (about 90 s)
    run(out, [python, "benchmarks/offload_probe.py", "--out", str(out)]
        + (["--device", "cpu", "--tiny", "--steps", "3"] if args.device == "cpu" else []),
        180, env=env)

    # 2. conformance shards and the CUDA tests side by side
    wanted = [a for a in args.algorithms.split(",") if a]
    shards = [[a for a in shard if not wanted or a in wanted] for shard in conformance_shards()]
    shards = [s for s in shards if s]
    started = []
    for i, shard in enumerate(shards):
        folder = work / f"conformance-{i}"
        command = [python, "-c", "from unified_opt.cli import main; raise SystemExit(main())",
                   "conformance", "--device", args.device, "--backends", "torch",
                   "--algorithms", ",".join(shard), "--out", str(folder),
                   "--timeout", str(int(args.part_timeout_s - 20))]
        log(out, "$ " + " ".join(command))
        started.append((folder, subprocess.Popen(command, cwd=ROOT, env=env,
                                                 stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True)))
    tests = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CUDA_TESTS]
    if args.device == "cpu":
        tests = tests[:-1] + ["-k", "not under_triton_s_interpreter and not compiles"]
    done = run(out, tests, args.part_timeout_s, env=env)
    write_text(out / "cuda_tests.txt",
        "timed out\n" if done is None else done.stdout[-60000:] + done.stderr[-20000:])
    tests_ok = done is not None and done.returncode == 0
    codes = []
    for folder, process in started:
        try:
            text, _ = process.communicate(timeout=max(5.0, args.part_timeout_s))
        except subprocess.TimeoutExpired:
            process.kill()
            text, _ = process.communicate()
        codes.append(process.returncode)
        with open(out / "gpu_check.log", "a") as f:
            f.write(f"--- {folder.name} (exit {process.returncode})\n{text[-8000:]}\n")
    summary = summarize([folder for folder, _ in started])
    summary["exit_codes"] = codes
    write_text(out / "conformance.json", json.dumps(summary, indent=1))
    write_text(out / "conformance.md", conformance_markdown(summary, info))
    log(out, f"conformance {summary['counts']} exit codes {codes}; tests "
             f"{'passed' if tests_ok else 'did not pass'}")
    if args.device == "cuda":
        results = ROOT / "benchmarks" / "results"
        for name in ("gpu_step_time.json", "gpu_step_time.md", "conformance.md"):
            if (out / name).exists():
                shutil.copy(out / name, results / (name if name.startswith("gpu")
                                                   else "gpu_conformance.md"))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if tests_ok and codes and all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
