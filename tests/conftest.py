"""Test-session set-up.

The backend tests import their framework in this process. Importing paddle before
mindspore breaks mindspore (an undefined oneDNN symbol), while mindspore first is
fine, so mindspore (when installed) is imported here, before any test module. A test
in this process uses one framework.

Tests that compare frameworks run each framework in its own process, through the
conformance runner: a test module lists its cases in ``WORKER_CASES`` and takes the
``worker_runs`` fixture. The session starts one conformance run for the ``WORKER_CASES``
of every collected module as soon as collection ends, in a background thread (the
workers are other processes: they run while the tests of this process do), and the
fixture waits for it. The modules that take it run last, so that the other modules' tests
run meanwhile. Under pytest-xdist (``-n 2``: the README's test command) one test process
makes that run, in a directory the xdist controller hands every test process
(:func:`pytest_configure_node`), and the others read its ``report.json`` and trajectories
from there once it is done.

MindSpore's CPU kernels run on one thread in this process. Several of them (nn.Adam
with weight decay, nn.Adam(use_offload=True) with weight decay and a loss scale, among
those measured) round some elements differently depending on where the thread pool cuts
the tensor into chunks, and the pool picks its chunk sizes by timing: two instances of
one class on the same inputs then differ by an ulp now and then under load (seen in CI:
1 element of 4225, 1 ulp, at step 15). The tests here compare such instances bit for
bit; one thread makes the cut the same every time. The conformance workers keep
MindSpore's default threads.

The run starts by naming the CPU, its vector extensions and any setting that limits
the frameworks' vector code (:func:`cpu_lines`, with ``-q`` too): Paddle's and
MindSpore's CPU kernels round by the vector code the CPU allows (docs/backends.md), so a
failure is tied to a CPU. ``.ci/without_avx512/run`` emulates a CPU without AVX-512.
"""

import importlib.util
import json
import os
import platform
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("mindspore") is not None:
    import mindspore  # (import order: see the module docstring)

    # one thread for MindSpore's kernels (threads_num) and for the own path's, which
    # follow runtime_num_threads (threads_num cannot be read back)
    mindspore.device_context.cpu.op_tuning.threads_num(1)
    mindspore.set_context(runtime_num_threads=1)


#: the /proc/cpuinfo flags that name vector extensions (x86, Arm, POWER)
_VECTOR = re.compile(r"^(sse|ssse|avx|fma|f16c|amx|asimd|sve|neon|vsx|altivec)")
#: environment variables that keep a framework from vector code the CPU has
#: (.ci/without_avx512/run sets them, with a preloaded shim)
LIMITS = ("ATEN_CPU_CAPABILITY", "TORCHINDUCTOR_CPP_MARCH", "MKL_ENABLE_INSTRUCTIONS",
          "ONEDNN_MAX_CPU_ISA", "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "LD_PRELOAD")


def cpu_lines(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The CPU model and its vector extensions (``cpuinfo``, else what ``platform``
    says), and the settings that limit the vector code in this process."""
    from unified_opt.devices import cpu_info  # (after mindspore: see the module)

    model, listed = cpu_info(cpuinfo)
    flags = [f for f in listed if _VECTOR.match(f)]
    model = model or platform.processor() or "unknown model"
    lines = [f"cpu: {model} ({platform.machine()}, {os.cpu_count()} cores)",
             "cpu vector extensions: " + (" ".join(flags) or "not listed")]
    limits = [f"{k}={os.environ[k]}" for k in LIMITS if os.environ.get(k)]
    if limits:
        lines.append("cpu vector code limited by: " + ", ".join(limits))
    return lines


def pytest_report_header(config):
    return cpu_lines()


def pytest_sessionstart(session):
    # -q hides the header; these lines still come first
    if session.config.get_verbosity() < 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            for line in cpu_lines():
                reporter.write_line(line)


def require(framework: str):
    """Skip marker for tests that need ``framework`` installed."""
    return pytest.mark.skipif(importlib.util.find_spec(framework) is None,
                              reason=f"{framework} is not installed")


class _Background:
    """The conformance run over the collected ``WORKER_CASES``, made in a thread of this
    process into ``out``; ``done`` (a file) is written once it ends, for the other test
    processes of an xdist run."""

    def __init__(self, cases, out: Path):
        self.cases, self.out = cases, out
        self.runs = self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        from support import worker_runs

        try:
            self.runs = worker_runs(self.cases, self.out)
        except BaseException as exc:   # re-raised in the tests that need the runs
            self.error = exc
            self.out.mkdir(parents=True, exist_ok=True)     # (refused before the runner made it)
            (self.out / _FAILED).write_text(f"{type(exc).__name__}: {exc}")
        (self.out / _DONE).touch()

    def result(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.runs


class _Made:
    """Another test process's :class:`_Background` run, read from its directory once its
    ``done`` file is there."""

    def __init__(self, out: Path):
        self.out, self.thread = out, None

    def result(self):
        from support import WorkerRuns

        pid = self.out.parent / "maker" / "pid"
        while not pid.exists():       # written just after the maker's mkdir
            time.sleep(0.1)
        maker = int(pid.read_text())
        while not (self.out / _DONE).exists():
            try:
                os.kill(maker, 0)
            except ProcessLookupError:
                if (self.out / _DONE).exists():
                    break
                raise RuntimeError(f"the test process {maker} that made the conformance run "
                                   "over WORKER_CASES ended before the run did") from None
            time.sleep(1)
        if (self.out / _FAILED).exists():
            raise RuntimeError("the conformance run over WORKER_CASES (made in another test "
                               "process) failed: " + (self.out / _FAILED).read_text())
        return WorkerRuns(json.loads((self.out / "report.json").read_text()), self.out)


_DONE, _FAILED = "done", "failed.txt"
_BACKGROUND: list = []


def pytest_collection_modifyitems(session, config, items):
    """Whole modules in three bands, each in its order: the modules with a test marked
    ``slow`` first, then the others, and last the modules whose tests take
    ``worker_runs``. Under xdist (``--dist loadfile``: a module's tests share its caches
    and fixtures in one process) the long modules then start at once instead of holding a
    process at the end, and the background run overlaps the other modules' tests instead
    of holding the first test that needs it (test_acceptance.py, early in the alphabet).

    ``UO_TEST_SHARD=k/n`` keeps every n-th test from the k-th (a test that runs a file's
    tests in several children at once: tests/test_cuda_engine.py)."""
    slow = {item.module for item in items if item.get_closest_marker("slow")}
    waiting = {item.module for item in items
               if "worker_runs" in getattr(item, "fixturenames", ())}

    def band(item):
        module = getattr(item, "module", None)
        return 2 if module in waiting else 0 if module in slow else 1

    items.sort(key=band)
    shard = os.environ.get("UO_TEST_SHARD")
    if shard:
        k, n = (int(x) for x in shard.split("/"))
        config.hook.pytest_deselected(items=[x for i, x in enumerate(items) if i % n != k])
        items[:] = items[k::n]


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    modules, cases, seen = [], [], set()
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None and module not in modules:
            modules.append(module)
    for module in modules:
        for case in getattr(module, "WORKER_CASES", ()):
            if case.id in seen:
                raise ValueError(f"WORKER_CASES: case id {case.id!r} appears twice")
            seen.add(case.id)
            cases.append(case)
    if not cases:
        return
    shared = getattr(session.config, "workerinput", {}).get("uo_worker_runs")
    if shared is None:
        _BACKGROUND.append(_Background(cases, Path(tempfile.mkdtemp(prefix="uo-worker-runs-"))))
        return
    maker = Path(shared) / "maker"
    try:                                # the first test process to get here makes the run
        maker.mkdir()
    except FileExistsError:
        _BACKGROUND.append(_Made(Path(shared) / "runs"))
    else:
        (maker / "pid.part").write_text(str(os.getpid()))
        (maker / "pid.part").rename(maker / "pid")
        _BACKGROUND.append(_Background(cases, Path(shared) / "runs"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """(xdist controller) every test process gets the directory of the one run."""
    config = node.config
    if not hasattr(config, "_uo_worker_runs"):
        config._uo_worker_runs = tempfile.mkdtemp(prefix="uo-worker-runs-")
    node.workerinput["uo_worker_runs"] = config._uo_worker_runs


def pytest_sessionfinish(session):
    for background in _BACKGROUND:
        if background.thread is not None:
            background.thread.join()
            if not hasattr(session.config, "workerinput"):
                shutil.rmtree(background.out, ignore_errors=True)


def pytest_unconfigure(config):
    # (xdist controller) after every test process has ended
    if hasattr(config, "_uo_worker_runs"):
        shutil.rmtree(config._uo_worker_runs, ignore_errors=True)


@pytest.fixture(scope="session")
def worker_runs():
    """The conformance runner's report over every collected module's ``WORKER_CASES``
    (:class:`support.WorkerRuns`), with the trajectories kept."""
    if not _BACKGROUND:
        pytest.skip("no WORKER_CASES collected")
    return _BACKGROUND[0].result()
