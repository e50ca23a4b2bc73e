"""The ``unified-opt`` command.

``unified-opt conformance [--backends torch,paddle,mindspore] [--algorithms sgd,adam]
[--cases GLOB,...] [--steps N] [--out DIR] [--jobs N] [--timeout S]`` runs the suite
(one worker process per backend), prints the matrix, writes ``DIR/report.json``,
``report.md`` and ``junit.xml``, and exits 0 only when every result passes (1 when one
fails or errors, 2 for a bad command line).

``unified-opt explain ALGORITHM --backend NAME [key=value ...]`` prints which path
``uo.build`` takes and why. ALGORITHM is a registry name (``adamw``) or a native
class's qualified name (``mindspore.nn.AdamWeightDecay``, read through its preset
with the native argument names). Values are JSON (``betas=[0.9,0.99]``,
``amsgrad=true``); anything that is not JSON is a string (``eps_placement=eps_hat``).

``unified-opt matrix [--out docs/compatibility.md]`` writes the compatibility matrix
(algorithm x backend x path, preset x backend) generated from the lowering tables.
"""

from __future__ import annotations

import argparse
import json
import sys

USAGE_ERROR = 2


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="unified-opt", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("conformance", help="run the conformance suite")
    run.add_argument("--backends", type=_names, default=None,
                     help="comma-separated backends (default: every installed one)")
    run.add_argument("--algorithms", type=_names, default=None,
                     help="comma-separated algorithm names (default: all with cases)")
    run.add_argument("--cases", type=_names, default=None,
                     help="comma-separated case id patterns (shell-style, e.g. 'adam_*')")
    run.add_argument("--steps", type=int, default=None,
                     help="steps per case (>= 50; default: each case's own)")
    run.add_argument("--out", default="conformance-report", help="report directory")
    run.add_argument("--jobs", type=int, default=2, help="backend workers run at once")
    run.add_argument("--timeout", type=float, default=None,
                     help="seconds before a backend's worker is stopped")
    explain = commands.add_parser("explain", help="which lowering uo.build picks, and why")
    explain.add_argument("algorithm")
    explain.add_argument("--backend", required=True)
    explain.add_argument("hyperparameters", nargs="*", metavar="key=value")
    matrix = commands.add_parser("matrix", help="write the compatibility matrix")
    matrix.add_argument("--out", default="docs/compatibility.md")
    return parser


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _keywords(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {pair!r}")
        out[key] = _value(value)
    return out


def _explain(args) -> int:
    import unified_opt as uo

    try:
        kwargs = _keywords(args.hyperparameters)
        if "." in args.algorithm:
            spec = uo.preset(args.algorithm, **kwargs)
        else:
            spec = uo.get(args.algorithm, **kwargs)
        decision = uo.explain(spec, backend=args.backend)
    except (TypeError, ValueError, NotImplementedError) as error:
        return _usage_error(args, error)
    print(spec.to_json())
    print(decision)
    return 0


def _plan(args):
    """The (cases, backends) of a conformance command line; ValueError when it is wrong."""
    # not uo.backends(): importing unified_opt.backends.<name> rebinds that attribute
    # to the subpackage
    from unified_opt.build import backends as installed_backends
    from unified_opt.conformance.cases import default_cases, select

    installed = installed_backends()
    backends = args.backends if args.backends is not None else installed
    missing = [b for b in backends if b not in installed]
    if missing:
        raise ValueError(f"--backends: {missing} not installed; installed: {installed}")
    if not backends:
        raise ValueError("no backend is installed (pip install 'unified-opt[torch]')")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    cases = default_cases(args.algorithms)
    if args.cases is not None:
        cases = select(cases, args.cases)
    if args.steps is not None:
        cases = [c.with_steps(args.steps) for c in cases]
    return cases, backends


def _conformance(args) -> int:
    from unified_opt.conformance import runner
    from unified_opt.conformance.report import text_matrix

    try:
        cases, backends = _plan(args)
    except (TypeError, ValueError) as error:
        return _usage_error(args, error)
    print(f"{len(cases)} cases on {', '.join(backends)} -> {args.out}", flush=True)
    report = runner.run(cases, backends, args.out, jobs=args.jobs, timeout=args.timeout,
                        progress=lambda line: print(line, flush=True))
    print()
    print(text_matrix(report))
    print(f"reports: {args.out}/report.json, report.md, junit.xml")
    summary = report["summary"]
    return 0 if summary["fail"] == 0 and summary["error"] == 0 else 1


def _matrix(args) -> int:
    from pathlib import Path

    from unified_opt.compatibility import markdown

    Path(args.out).write_text(markdown())
    print(f"wrote {args.out}")
    return 0


def _usage_error(args, error: Exception) -> int:
    print(f"unified-opt {args.command}: error: {error}", file=sys.stderr)
    return USAGE_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    # key=value pairs may follow --backend, which argparse does not give to a positional
    args, extra = parser.parse_known_args(argv)
    if args.command in ("conformance", "matrix") and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "conformance":
        return _conformance(args)
    if args.command == "matrix":
        return _matrix(args)
    args.hyperparameters += extra
    return _explain(args)


if __name__ == "__main__":
    sys.exit(main())
