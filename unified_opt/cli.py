"""The ``unified-opt`` command.

``unified-opt conformance [--backends torch,paddle,mindspore] [--algorithms sgd,adam]
[--cases GLOB,...] [--steps N] [--out DIR] [--jobs N] [--timeout S] [--keep-trajectories]
[--device cpu|cuda[:N]|gpu[:N]|npu[:N]]`` runs the suite (one worker process per backend,
each judging its own runs) with the parameters on the device (default cpu), prints the
matrix, writes ``DIR/report.json``, ``report.md``, ``report.html`` and ``junit.xml``, and
exits 0 only when every result passes (1 when one fails or errors, 2 for a bad command
line, a device a selected backend cannot use, or a DIR another run holds, before any
case runs). SIGINT (Ctrl-C) or SIGTERM stops the run: the workers are killed, the
reports are written marked interrupted, one line says so on stderr, and the exit status
is 130 or 143 (128 + the signal's number). While it runs, DIR's reports are stubs
marked incomplete, never an earlier run's.

``unified-opt explain SPEC --backend NAME [key=value ...]`` prints the spec and which
path ``uo.build`` takes, and why. SPEC is a registry name in any case (``adamw``,
``AdamW``), a native class's qualified name (``mindspore.nn.AdamWeightDecay``, read
through its preset with the native argument names), or a whole spec expression
(``"adamw(lr=1e-3, amsgrad=True)"``, ``"torch.optim.Adam(lr=1e-3)"``). Values are read
by :func:`unified_opt.expressions.parse_value`: Python literals (``amsgrad=True``,
``betas=(0.9,0.99)``, ``eps=1e-6``), schedules and clips (``lr="Cosine(lr=0.1,
T_max=100)"``, ``grad_clip="ClipByGlobalNorm(max_norm=1.0)"``); a bare word is a string
(``eps_placement=eps_hat``). Nothing is evaluated by Python.

``unified-opt matrix [--out FILE]`` prints the compatibility matrix (algorithm x backend
x path, preset x backend) generated from the lowering tables as Markdown, or writes it
to FILE (``unified-opt matrix --out docs/compatibility.md`` regenerates the committed one).

``unified-opt check MODULE:FACTORY (--spec EXPR | --preset EXPR) [--backend NAME]
[--steps N] [--out DIR] [--finite-only] [--device DEVICE]`` checks a user's optimizer
(``FACTORY(params)``) against a spec's conformance streams
(:mod:`unified_opt.conformance.checker`); exit 1 when it does not conform.

``unified-opt diff A B`` says whether two configurations (native constructor calls or
spec expressions) compute the same numbers, and which knobs differ
(:mod:`unified_opt.conformance.spec_diff`); exit 1 when they differ.

``unified-opt report diff OLD.json NEW.json [--threshold X] [--json FILE]`` lists what
changed between two reports (:mod:`unified_opt.conformance.report_diff`); exit 1 on a
new failure.

Exit status: 0 ok; 1 what the command judges does not hold (a conformance result fails
or errors, a checked optimizer does not conform, ``diff``'s configurations differ,
``report diff`` finds a new failure, ``port`` refuses a construction); 2 a bad command
line or input that cannot be used (a one-line message naming the argument and the
value); 130 or 143 a conformance run stopped by SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import textwrap
import threading

USAGE_ERROR = 2
DEVICE_HELP = ("where the parameters live: cpu (default), cuda or gpu (cuda:N), npu (npu:N; "
               "torch through torch_npu); torch cuda:N, Paddle gpu:N, MindSpore "
               "device_target GPU/Ascend. A device a backend cannot use is exit status 2")


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return names


_EXPLAIN_EPILOG = """\
examples:
  unified-opt explain adamw --backend torch amsgrad=True weight_decay=0.1
  unified-opt explain adamw --backend torch lr="Cosine(lr=0.1, T_max=100)" \\
      grad_clip="ClipByGlobalNorm(max_norm=1.0)"
  unified-opt explain "adamw(lr=1e-3, amsgrad=True)" --backend paddle
  unified-opt explain mindspore.nn.AdamWeightDecay --backend torch learning_rate=1e-3
  unified-opt explain "torch.optim.Adam(lr=1e-3, amsgrad=True)" --backend mindspore

An expression holds Python literals (True/False/None, numbers such as 1e-3 and -1,
quoted strings, tuples, lists) and calls of the algorithm specs (uo.algorithms(), any
case), the schedules of uo.schedules (Cosine, LinearWarmup, ...), the clips
ClipByGlobalNorm, ClipByNorm, ClipByValue, and native classes by qualified name
(uo.presets(), uo.schedules.presets()). Nothing else is accepted; nothing is evaluated.
"""


def _parser() -> argparse.ArgumentParser:
    from unified_opt.backend import BACKENDS

    parser = argparse.ArgumentParser(
        prog="unified-opt",
        description="One spec per optimizer algorithm, lowered into native PyTorch, "
                    "PaddlePaddle and MindSpore optimizers: run the conformance suite, "
                    "explain a lowering, or write the compatibility matrix.",
        epilog="Run 'unified-opt COMMAND --help' for a command's options. Exit status: 0 "
               "ok; 1 what the command judges does not hold (a conformance result fails "
               "or errors, a checked optimizer does not conform, diff's two "
               "configurations differ, report diff finds a new failure, port refuses a "
               "construction); 2 a bad command line or input that cannot be used (each "
               "command's --help says which); 130 or 143 a conformance run stopped by "
               "SIGINT or SIGTERM.")
    from unified_opt import __version__

    parser.add_argument("--version", action="version", version=f"unified-opt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "conformance", help="run the conformance suite and write its reports",
        description="Run every selected case on every selected backend (one worker process "
                    "per backend) against the numpy reference, with the parameters on "
                    "--device, print the matrix and write DIR/report.json, report.md, "
                    "report.html and junit.xml. Exit status 0 when every result passes, 1 "
                    "when one fails or errors, 2 for a bad command line, a device a "
                    "selected backend cannot use, or a DIR another run is writing into "
                    "(said before any case runs). While the run goes on, DIR's reports are "
                    "stubs marked incomplete (report.json \"status\": \"incomplete\", "
                    "junit.xml an error), never an earlier run's. SIGINT (Ctrl-C) or "
                    "SIGTERM stops the workers, writes the reports marked interrupted with "
                    "the results that finished, and exits 130 or 143.")
    run.add_argument("--backends", type=_names, default=None, metavar="NAME,...",
                     help="comma-separated backends (default: every installed one)")
    run.add_argument("--algorithms", type=_names, default=None, metavar="NAME,...",
                     help="comma-separated algorithm names (default: all with cases)")
    run.add_argument("--cases", type=_names, default=None, metavar="GLOB,...",
                     help="comma-separated case id patterns (shell-style, e.g. 'adam_*')")
    run.add_argument("--steps", type=int, default=None, metavar="N",
                     help="steps per case (>= 50; default: each case's own)")
    run.add_argument("--out", default="conformance-report", metavar="DIR",
                     help="report directory: report.json, report.md, report.html, "
                          "junit.xml (default: %(default)s); one run at a time: a second "
                          "run into it is refused (exit status 2)")
    run.add_argument("--jobs", type=int, default=2, metavar="N",
                     help="backend workers run at once (default: %(default)s)")
    run.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="seconds a backend's worker may run (> 0; default: no limit); "
                          "then its process group is killed and its unfinished runs are "
                          "errors")
    run.add_argument("--device", default="cpu", metavar="DEVICE",
                     help=DEVICE_HELP + "; distributed cases (ranks over gloo) run on "
                          "the CPU only and are listed as not run elsewhere")
    run.add_argument("--verbose", action="store_true",
                     help="print a line per run and the whole matrix (default: a progress "
                          "line per backend, then the summary and the failures; the matrix "
                          "is in DIR/report.md)")
    run.add_argument("--keep-trajectories", action="store_true",
                     help="keep every run's trajectory (compressed .npz under "
                          "DIR/trajectories/<backend>); by default only those of runs that "
                          "do not pass, up to 25 MB per backend")
    explain = commands.add_parser(
        "explain", help="which lowering uo.build picks for a spec, and why",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EXPLAIN_EPILOG,
        description=textwrap.fill(
            "Print the spec (as JSON) and which path uo.build takes on a backend: the "
            "native class that computes it exactly, or the own implementation, with every "
            "unmet condition of the other native classes.", 79))
    explain.add_argument("algorithm", metavar="SPEC",
                         help="an algorithm name (adamw, AdamW), a native class's qualified "
                              "name (torch.optim.Adam, read through its preset with the "
                              "native argument names) or a whole spec expression "
                              "(\"adamw(lr=1e-3, amsgrad=True)\")")
    explain.add_argument("--backend", required=True, metavar="NAME",
                         help=f"the backend whose lowering to explain: {', '.join(BACKENDS)} "
                              "(need not be installed)")
    explain.add_argument("hyperparameters", nargs="*", metavar="key=value",
                         help="hyperparameters (native argument names for a native class), "
                              "added to SPEC's; a value is a Python literal (True, 1e-3, "
                              "(0.9,0.99), 'text'), a schedule or clip call "
                              "(\"Cosine(lr=0.1, T_max=100)\"), or a bare word read as a "
                              "string (eps_hat)")
    matrix = commands.add_parser(
        "matrix", help="print or write the compatibility matrix (Markdown)",
        description="Generate the compatibility matrix (algorithm x backend x native class, "
                    "preset x backend) from the lowering tables, as Markdown on stdout, or "
                    "into FILE with --out (unified-opt matrix --out docs/compatibility.md "
                    "regenerates the committed one).")
    matrix.add_argument("--out", default=None, metavar="FILE",
                        help="write the Markdown to FILE (its directory must exist) instead "
                             "of printing it")
    _add_check(commands)
    _add_report(commands)
    _add_diff(commands)
    _add_port(commands)
    return parser


def _add_check(commands) -> None:
    check = commands.add_parser(
        "check", help="check your own optimizer against a spec's conformance streams",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Call FACTORY(params) (MODULE:FACTORY, imported; it returns an optimizer of "
            "one framework, or an (optimizer, lr_scheduler) pair), drive it through the "
            "spec's gradient streams (>= 50 steps each, adversarial magnitudes and "
            "non-finite elements) and compare its parameters, lr and state (where they "
            "can be read) with the float64 oracle under the suite's rule. Prints the "
            "verdict, the first failing step and quantity and the knob the optimizer "
            "follows; writes the reports with --out. Exit status 0 when it conforms, 1 "
            "when it does not, 2 for a bad command line.", 79),
        epilog="examples:\n  unified-opt check mypkg.optim:make_lamb --spec \"lamb(lr=1e-3)\" "
               "--backend torch\n  unified-opt check mypkg.optim:make_lamb --preset "
               "\"paddle.optimizer.Lamb(learning_rate=1e-3)\" --out check-report")
    check.add_argument("factory", metavar="MODULE:FACTORY",
                       help="a function of the parameter list returning the optimizer")
    given = check.add_mutually_exclusive_group(required=True)
    given.add_argument("--spec", metavar="EXPR",
                       help="the spec it claims to compute: \"adamw(lr=1e-3, "
                            "weight_decay=0.01)\"")
    given.add_argument("--preset", metavar="EXPR",
                       help="the spec as a native constructor call read through its preset: "
                            "\"paddle.optimizer.Lamb(learning_rate=1e-3)\"")
    check.add_argument("--backend", default=None, metavar="NAME",
                       help="the optimizer's framework (default: the one the factory's "
                            "module imports)")
    check.add_argument("--steps", type=int, default=None, metavar="N",
                       help="steps per stream (>= 50; default 50)")
    check.add_argument("--out", default=None, metavar="DIR",
                       help="write report.json, report.md, report.html, junit.xml to DIR")
    check.add_argument("--finite-only", action="store_true",
                       help="leave out the stream with NaN and Inf gradient elements")
    check.add_argument("--device", default="cpu", metavar="DEVICE",
                       help=DEVICE_HELP + " (the parameters the factory gets)")


def _add_report(commands) -> None:
    report = commands.add_parser("report", help="work with conformance reports (diff)",
                                 description="Work with conformance reports.")
    actions = report.add_subparsers(dest="report_command", required=True, metavar="ACTION",
                                    help="diff: what changed between two report.json files")
    diff = actions.add_parser(
        "diff", help="what changed between two report.json files",
        description="List new failures, fixes, worst-ratio regressions beyond --threshold, "
                    "and results and cases added or removed between OLD and NEW. Exit "
                    "status 1 when NEW has a failure OLD did not have, else 0 (2 for a bad "
                    "command line or an unreadable report).")
    diff.add_argument("old", metavar="OLD", help="the baseline report.json (e.g. main's)")
    diff.add_argument("new", metavar="NEW", help="the report.json to judge")
    diff.add_argument("--threshold", type=float, default=2.0, metavar="X",
                      help="a passing result's worst ratio growing more than X times is a "
                           "regression (default: %(default)s)")
    diff.add_argument("--json", default=None, metavar="FILE",
                      help="also write the diff as JSON to FILE")


_DIFF_EPILOG = """\
examples:
  unified-opt diff "torch.optim.Adam(lr=1e-3)" "mindspore.nn.Adam(learning_rate=1e-3)"
  unified-opt diff "torch.optim.AdamW(lr=1e-3)" \\
      "mindspore.nn.AdamWeightDecay(learning_rate=1e-3, weight_decay=0.01)"
  unified-opt diff "adamw(lr=1e-3)" "adamw(lr=1e-3, eps_placement='eps_hat')"
"""

_PORT_EPILOG = """\
examples:
  unified-opt port train.py --to paddle                   # the ported script on stdout
  unified-opt port train.py --to mindspore -o train_ms.py
  unified-opt port train_paddle.py --to torch -o train_torch.py
"""


def _add_diff(commands) -> None:
    diff = commands.add_parser(
        "diff", help="do two optimizer configurations compute the same numbers?",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_DIFF_EPILOG,
        description=textwrap.fill(
            "Run two configurations, each a native constructor call as a script writes "
            "it (\"torch.optim.Adam(lr=1e-3)\", \"mindspore.nn.Adam(learning_rate=1e-3)\") "
            "or a spec expression, through their presets on the same parameters and "
            "gradient streams, and say whether B computes A's numbers within the float32 "
            "noise floor; if not, where they part, by how much, and which knobs differ, "
            "each tried alone. Exit status 0 when they are the same, 1 when they differ, "
            "2 for a bad command line.", 79))
    diff.add_argument("spec_a", metavar="A", help="the first configuration (the oracle)")
    diff.add_argument("spec_b", metavar="B", help="the second configuration")


def _add_port(commands) -> None:
    port = commands.add_parser(
        "port", help="map a script's optimizer, scheduler, clip and parameter-selection "
        "calls to another framework",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_PORT_EPILOG,
        description=textwrap.fill(
            "A torch script keeps its code: only framework calls are mapped, their "
            "arguments kept as the expressions they are (read at run time). "
            "torch.optim.X(params, ...) becomes uo.build(uo.preset(\"torch.optim.X\", ...), "
            "params); schedulers become uo.lr_scheduler.<the same name>; clip_grad_norm_ / "
            "clip_grad_value_ become uo's (on MindSpore a norm clip right before the step "
            "becomes the optimizer's grad_clip); named_parameters(), parameters(), "
            "named_modules(), isinstance tests of torch.nn classes and optimizer state "
            "save/load become the target's; param_groups loops stay. A Paddle or MindSpore "
            "script's optimizer and scheduler constructions are read into a spec and "
            "written as the target's exact class or uo.build(spec, ...). Lists every "
            "rewrite with its reason on stderr. What is not mapped is left as written, "
            "marked by a '# unified-opt port: not ported: <why>' comment, and listed with "
            "its line, every reason in one run; the rest is written all the same (exit 1 "
            "then, and when no optimizer construction is found); 2 for a bad command "
            "line.", 79))
    port.add_argument("script", metavar="SCRIPT", help="the training script (.py)")
    port.add_argument("--to", required=True, metavar="FRAMEWORK",
                      help="torch, paddle or mindspore")
    port.add_argument("-o", "--out", metavar="FILE",
                      help="write the rewritten script here (default: stdout)")


def _port(args) -> int:
    from pathlib import Path

    from unified_opt.files import write_text
    from unified_opt.porting.script import port_source

    script = Path(args.script)
    try:
        source = script.read_text(encoding="utf-8")
        ported = port_source(source, args.to, filename=str(script))
    except (OSError, ValueError) as error:
        return _usage_error(args, error)
    if args.out:
        # written first: an --out that cannot be written is a usage error, alone
        try:
            write_text(args.out, ported.source)       # atomically, UTF-8
        except OSError as error:
            return _usage_error(args, ValueError(f"--out {args.out}: "
                                                 f"{error.strerror or error}"))
    # a construction that cannot be read stays as written (marked): the rest is ported
    for line, message in ported.refusals:
        print(f"{script}:{line}: cannot port: {message}", file=sys.stderr)
    for rewrite in ported.rewrites:
        print(f"{script}:{rewrite.line}: {' '.join(rewrite.original.split())}\n"
              f"    -> {rewrite.replacement}\n    because {rewrite.reasons}", file=sys.stderr)
    for note in ported.notes:
        print(f"{script}: note: {note}", file=sys.stderr)
    if ported.nothing_found:
        print(f"unified-opt port: {ported.nothing_found}", file=sys.stderr)
    if not args.out:
        sys.stdout.write(ported.source)
    return 1 if ported.refusals or ported.nothing_found else 0


def _diff(args) -> int:
    from unified_opt.conformance.spec_diff import diff

    try:
        found = diff(args.spec_a, args.spec_b)
    except (TypeError, ValueError, NotImplementedError) as error:
        return _usage_error(args, error)
    print(f"A: {found.spec_a}\nB: {found.spec_b}")
    print(found)
    return 0 if found.same else 1


def _check(args) -> int:
    import os

    from unified_opt.conformance.checker import check, load_factory
    from unified_opt.expressions import parse_spec

    try:
        text = args.spec if args.spec is not None else args.preset
        if args.preset is not None and "(" not in args.preset:
            raise ValueError(f"--preset {args.preset!r}: write the constructor call, e.g. "
                             "\"paddle.optimizer.Lamb(learning_rate=1e-3)\"")
        spec = parse_spec(text)
        if args.backend is not None:
            # the backend's framework first: MindSpore cannot be imported after paddle
            # (a oneDNN symbol clash), which a factory's module may import
            _import_framework(args.backend)
        # MODULE from the current folder, as python -m and pytest find it
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        if args.out is not None:
            _check_out_directory(args.out)
        factory = load_factory(args.factory)
        result = check(factory, spec, backend=args.backend, steps=args.steps, out=args.out,
                       nonfinite=not args.finite_only, device=args.device)
    except (TypeError, ValueError, NotImplementedError) as error:
        return _usage_error(args, error)
    print(f"{args.factory} against {spec}")
    print(result)
    if args.out is not None:
        print(f"reports: {args.out}/")
        kept = {r["trajectory"].rpartition("/")[0] for r in result.report["results"]
                if r.get("trajectory")}
        for folder in sorted(kept):          # the failing streams' (docs/ci.md)
            print(f"trajectories: {args.out}/{folder}/")
    return 0 if result.passed else 1


def _check_out_directory(out: str) -> None:
    """ValueError (a usage error, before any run) where the reports directory ``out``
    cannot be made: it, or the nearest existing folder above it, is not a directory."""
    from pathlib import Path

    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out}: is a file, not a directory (the reports are "
                         "written into a directory)")
    existing = next((p for p in path.absolute().parents if p.exists()), None)
    if existing is not None and not path.exists() and not existing.is_dir():
        raise ValueError(f"--out {out}: {str(existing)!r} is a file, not a directory")


def _import_framework(backend: str) -> None:
    """Import ``backend``'s framework (ValueError naming the fix when it is missing or
    cannot be imported)."""
    import importlib
    import importlib.util

    from unified_opt.backend import BACKENDS

    if backend not in BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if importlib.util.find_spec(backend) is None:
        raise ValueError(f"--backend {backend}: {backend} is not installed in this Python "
                         f"({sys.executable}); pip install 'unified-opt[{backend}]'")
    try:
        importlib.import_module(backend)
    except Exception as error:      # a broken install: its import fails, not the check
        raise ValueError(f"--backend {backend}: importing {backend} failed: "
                         f"{type(error).__name__}: {error}") from None


def _report(args) -> int:
    from unified_opt.conformance.report_diff import main_diff

    try:
        return main_diff(args.old, args.new, args.threshold, json_out=args.json)
    except (TypeError, ValueError, OSError) as error:
        return _usage_error(args, error)


def _keywords(pairs: list[str]) -> dict:
    """``key=value`` pairs -> keywords, each value read by ``parse_value``."""
    from unified_opt.expressions import parse_value

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {pair!r}")
        if not key.isidentifier():
            raise ValueError(f"{key!r} in {pair!r} is not a hyperparameter name")
        if key in out:
            raise ValueError(f"{key} is given twice ({key}={value!r})")
        try:
            out[key] = parse_value(value)
        except (TypeError, ValueError, NotImplementedError) as error:
            raise type(error)(f"{key}={value!r}: {error}") from None
    return out


def _explain(args) -> int:
    import unified_opt as uo
    from unified_opt.expressions import parse_spec

    try:
        kwargs = _keywords(args.hyperparameters)
        spec = parse_spec(args.algorithm, **kwargs)
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
        _some_case_matches(cases, args.cases)
        cases = select(cases, args.cases)
    if args.steps is not None:
        cases = [c.with_steps(args.steps) for c in cases]
    return cases, backends


def _some_case_matches(cases, patterns: list[str]) -> None:
    """ValueError naming the patterns and the few closest ids when no id matches (the
    whole list of ids is hundreds of lines)."""
    import difflib
    import fnmatch

    ids = [c.id for c in cases]
    if any(fnmatch.fnmatchcase(i, p) for i in ids for p in patterns):
        return
    stems = [p.replace("*", "").replace("?", "").strip("[]") for p in patterns]
    close: list[str] = []
    for stem in stems:
        close += difflib.get_close_matches(stem, ids, n=5, cutoff=0.0) if stem else []
    close = list(dict.fromkeys(close))[:5]
    raise ValueError(f"--cases: no case matches {', '.join(map(repr, patterns))} (of "
                     f"{len(ids)} cases); closest: {', '.join(close) or ids[0]}")


#: the signals that stop a conformance run (CI's cancel and ``timeout`` send SIGTERM)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_stop_the_run():
    """SIGINT and SIGTERM raise :class:`~unified_opt.conformance.runner.Signalled` (a
    KeyboardInterrupt) in this, the main, thread; the runner then stops its workers and
    writes the interrupted reports. A second signal while it does is ignored, so that the
    clean-up is not cut short and leaves no worker running. A signal this process was
    started ignoring stays ignored (a shell's background job ignores SIGINT). Other
    threads cannot set handlers: there this does nothing. The handlers before are put
    back at the end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from unified_opt.conformance.runner import Signalled

    stopping = []

    def stop(signum, frame):
        if stopping:
            return
        stopping.append(signum)
        raise Signalled(signal.Signals(signum).name)

    before = {}
    for number in STOP_SIGNALS:
        handler = signal.getsignal(number)
        if handler is not signal.SIG_IGN:
            before[number] = signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)


def _conformance(args) -> int:
    from unified_opt.conformance.report import summary_line
    from unified_opt.conformance.runner import RunInterrupted, Signalled

    ran: list[dict] = []     # the report, once the run has returned
    with _signals_stop_the_run():
        try:
            return _run_conformance(args, ran)
        except RunInterrupted as stopped:
            name = stopped.signal_name
            if stopped.report["status"] == "complete":     # the signal came at the end
                line = (f"interrupted by {name} after the run ended ({args.out}'s reports "
                        f"are complete: {summary_line(stopped.report)})")
            else:
                line = (f"interrupted by {name}: the workers were stopped; {args.out}/"
                        "report.json, report.md, report.html and junit.xml are marked "
                        f"interrupted ({summary_line(stopped.report)}; the runs it did not "
                        "finish are errors)")
        except KeyboardInterrupt as error:    # before the run began, or after it ended
            name = error.signal_name if isinstance(error, Signalled) else "SIGINT"
            line = (f"interrupted by {name} "
                    + (f"after the run ended ({args.out}'s reports are complete)" if ran
                       else "before any case ran"))
        print(f"unified-opt conformance: {line}", file=sys.stderr, flush=True)
        return 128 + signal.Signals[name].value


def _run_conformance(args, ran: list) -> int:
    """``unified-opt conformance``; ``ran`` gets the report once the run has returned."""
    from pathlib import Path

    from unified_opt.conformance import runner
    from unified_opt.conformance.device import DeviceUnavailable, parse_device
    from unified_opt.conformance.progress import ProgressDisplay
    from unified_opt.conformance.report import problems_text, text_matrix

    try:
        if args.timeout is not None and not 0 < args.timeout < float("inf"):
            raise ValueError(f"--timeout must be a number of seconds > 0, got {args.timeout:g}")
        cases, backends = _plan(args)
        device = parse_device(args.device, "--device")
        _check_out_directory(args.out)
    except (TypeError, ValueError) as error:
        return _usage_error(args, error)
    where = "" if device.is_cpu else f" on {device}"
    print(f"{len(cases)} cases on {', '.join(backends)}{where} -> {args.out}", flush=True)
    try:
        with ProgressDisplay(verbose=args.verbose) as display:
            # off the CPU the runner asks each backend for the device before anything runs
            report = runner.run(cases, backends, args.out, jobs=args.jobs,
                                timeout=args.timeout, progress=display,
                                keep_trajectories=args.keep_trajectories, device=device)
    except (DeviceUnavailable, runner.OutInUse) as error:
        return _usage_error(args, error)      # it names the device and the backend / DIR
    ran.append(report)
    print()
    print(text_matrix(report) if args.verbose else problems_text(report))
    kept = [d for d in ("trajectories", "logs") if (Path(args.out) / d).is_dir()]
    print(f"reports: {args.out}/report.json, report.md, report.html, junit.xml"
          + "".join(f", {d}/" for d in kept))
    summary = report["summary"]
    # A worker that ends badly after its last run leaves every result standing, but
    # whatever broke (a crash at teardown, a leak the OS reports) must still fail the job.
    broken = [b for b, worker in report["backends"].items() if worker.get("error")]
    for backend in broken:
        print(f"[{backend}] {report['backends'][backend]['error'].splitlines()[0]}")
    return 0 if summary["fail"] == 0 and summary["error"] == 0 and not broken else 1


def _matrix(args) -> int:
    from pathlib import Path

    from unified_opt.compatibility import markdown
    from unified_opt.files import write_text

    out = Path(args.out) if args.out is not None else None
    if out is not None and not out.parent.is_dir():
        return _usage_error(args, ValueError(f"--out {args.out}: directory "
                                             f"{str(out.parent)!r} does not exist"))
    if out is not None and out.is_dir():
        return _usage_error(args, ValueError(f"--out {args.out}: is a directory; give a "
                                             "file name (e.g. docs/compatibility.md)"))
    text = markdown()
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    try:
        write_text(out, text)                         # atomically
    except OSError as error:
        return _usage_error(args, ValueError(f"--out {args.out}: {error.strerror or error}"))
    print(f"wrote {args.out}")
    return 0


def _usage_error(args, error: Exception) -> int:
    message = " ".join(str(error).split())      # one line, whatever the error's text
    print(f"unified-opt {args.command}: error: {message}", file=sys.stderr)
    return USAGE_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    # key=value pairs may follow --backend, which argparse does not give to a positional
    args, extra = parser.parse_known_args(argv)
    if args.command != "explain" and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "conformance":
        return _conformance(args)
    if args.command == "check":
        return _check(args)
    if args.command == "report":
        return _report(args)
    if args.command == "matrix":
        return _matrix(args)
    if args.command == "diff":
        return _diff(args)
    if args.command == "port":
        return _port(args)
    args.hyperparameters += extra
    return _explain(args)


if __name__ == "__main__":
    sys.exit(main())
