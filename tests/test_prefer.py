"""``uo.build(..., prefer="speed" | "native")`` (issue 21, section 1): the measured speed
table (``unified_opt/speed_table.json``, made by ``benchmarks/speed_table.py`` from the
committed results), the rule that reads it (:mod:`unified_opt.speed`), the decisions on
every backend, ``uo.explain``'s text, the conformance worker's native runs and the
porting tools' messages.

One framework per test (MindSpore is imported by conftest in every process).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt import speed
from unified_opt.backend import Context, load

ROOT = Path(__file__).resolve().parents[1]
#: a build of the large size class: one parameter of 2**21 elements
LARGE = (1024, 2048)
#: the issue's rows: backend, spec, the native class a prefer="native" build takes
ISSUE_ROWS = [
    ("mindspore", uo.Adam(lr=1e-3), "mindspore.experimental.optim.AdamW"),
    ("mindspore", uo.AdamW(lr=1e-3, weight_decay=0.01), "mindspore.experimental.optim.AdamW"),
    ("paddle", uo.Lamb(lr=1e-3, weight_decay=0.01), "paddle.optimizer.Lamb"),
    ("torch", uo.Adafactor(lr=1e-3), "torch.optim.Adafactor"),
]


def _script():
    loaded = importlib.util.spec_from_file_location("speed_table_script",
                                                    ROOT / "benchmarks" / "speed_table.py")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def _row(backend, device, algorithm, native, size_class="large", ratio=3.0):
    return {"backend": backend, "device": device, "algorithm": algorithm, "native": native,
            "size_class": size_class, "elements": 4198400, "native_ms": 3.0 * ratio,
            "own_ms": 3.0, "native_over_own": ratio, "source": "cpu", "measured": "test"}


@pytest.fixture
def table(monkeypatch):
    """A speed table of the test's own rows (monkeypatched into unified_opt.speed)."""
    rows = []
    data = {"threshold": speed.THRESHOLD, "rows": rows,
            "sources": {"cpu": {"file": "benchmarks/results/test.json",
                                "machine": "a test machine"}}}
    monkeypatch.setattr(speed, "table", lambda: data)
    return rows


# -- the table is data, made by the script from the committed results ------------------

def test_the_committed_table_is_what_the_script_makes_of_the_committed_results():
    script = _script()
    committed = (ROOT / "unified_opt" / "speed_table.json").read_text()
    assert committed == script.render(script.make(ROOT / "benchmarks" / "results")), \
        "run: python benchmarks/speed_table.py"
    assert script.main(["--check"]) == 0


def test_the_table_is_package_data():
    text = (ROOT / "pyproject.toml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith('"unified_opt" = ['))
    assert '"speed_table.json"' in line


def _committed_gpu() -> str:
    """The GPU of the committed CUDA run (``benchmarks/gpu_check.py`` writes it)."""
    results = json.loads((ROOT / "benchmarks/results/gpu_step_time.json").read_text())
    return results["environment"]["device_name"]


def test_the_table_holds_the_issue_rows_measured_at_least_one_and_a_half_times_faster():
    data = speed.table()
    assert set(data["sources"]) == {"cpu", "cuda"}
    assert data["sources"]["cuda"]["machine"] == f"{_committed_gpu()} (GPT-2 small)"
    keys = {(r["backend"], r["device"], r["algorithm"], r["native"], r["size_class"]): r
            for r in data["rows"]}
    for backend, spec, native in ISSUE_ROWS:
        row = keys[(backend, "cpu", spec.name, native, "large")]
        assert row["native_over_own"] >= speed.THRESHOLD, row
        assert row["native_over_own"] == round(row["native_ms"] / row["own_ms"], 2)
    assert keys[("mindspore-graph", "cpu", "adamw", "mindspore.experimental.optim.AdamW",
                 "large")]["native_over_own"] >= speed.THRESHOLD
    # CUDA, GPT-2 small on the committed GPU: torch's Adafactor against the Triton kernels
    cuda = keys[("torch", "cuda", "adafactor", "torch.optim.Adafactor", "large")]
    assert cuda["native_over_own"] >= speed.THRESHOLD and cuda["elements"] == 124439808
    # and fused AdamW stays: the own path is not 1.5x faster there
    assert keys[("torch", "cuda", "adamw", "torch.optim.AdamW", "large")][
        "native_over_own"] < speed.THRESHOLD


def test_size_classes():
    assert speed.size_class(0) == "small"
    assert speed.size_class(65535) == "small"
    assert speed.size_class(65536) == "medium"
    assert speed.size_class(2**21 - 1) == "medium"
    assert speed.size_class(2**21) == "large"
    assert [speed.size_class(4 * d * d + 4 * d) for d in speed.REPRESENTATIVE] == \
        ["small", "medium", "large"]


# -- the rule ------------------------------------------------------------------------------

def _decide(backend, spec, prefer="speed", **context):
    return load(backend).decide(spec, "auto", Context(**context), prefer)


def test_the_rule_own_where_measured_faster_the_class_otherwise(table, monkeypatch):
    monkeypatch.setattr(speed, "fast_engine", lambda device: "")
    table += [_row("torch", "cpu", "adamw", "torch.optim.AdamW", "large", 3.0),
              _row("torch", "cpu", "adamw", "torch.optim.AdamW", "small", 1.49)]
    spec = uo.AdamW(lr=1e-3, weight_decay=0.01)
    fast = _decide("torch", spec, elements=2**22)
    assert (fast.path, fast.alternative, fast.prefer) == ("own", "torch.optim.AdamW", "speed")
    assert fast.measured.ratio == 3.0 and fast.measured.size_class == "large"
    assert "3x faster than torch.optim.AdamW" in fast.reason
    assert "measured on a test machine, benchmarks/results/test.json" in fast.reason
    assert "prefer='native' builds torch.optim.AdamW" in fast.reason
    text = str(fast)
    assert text.splitlines()[0].startswith("torch: adamw -> own implementation")
    assert "alternative: torch.optim.AdamW (3x: native 9 ms, own 3 ms per step)" in text
    # under 1.5x: the class, saying what was measured
    slow = _decide("torch", spec, elements=1000)
    assert (slow.path, slow.native, slow.alternative) == \
        ("native", "torch.optim.AdamW", "own implementation")
    assert "keeps torch.optim.AdamW: the own implementation is not 1.5x faster" in slow.reason
    assert "1.49x" in slow.reason
    # a class without a row in between: the nearest measured one, said so
    medium = _decide("torch", spec, elements=2**17)
    assert medium.measured.nearest and "the nearest measured class" in medium.reason
    # no parameters (explain of a spec): the large class, said so
    unsized = _decide("torch", spec)
    assert unsized.path == "own" \
        and "no parameters given: read for the large class" in unsized.reason
    # prefer="native": the class, as before, nothing measured read
    native = _decide("torch", spec, prefer="native", elements=2**22)
    assert (native.path, native.alternative, native.measured) == \
        ("native", None, None)
    # no row for this class / device: the class
    other = _decide("torch", spec, elements=2**22, device="cuda")
    assert other.path == "native" and "no measurement of torch.optim.AdamW" in other.reason


def test_what_the_measurement_does_not_cover_keeps_the_class(table, monkeypatch):
    monkeypatch.setattr(speed, "fast_engine", lambda device: "")
    table.append(_row("torch", "cpu", "adamw", "torch.optim.AdamW", "large", 3.0))
    spec = uo.AdamW(lr=1e-3, weight_decay=0.01)
    for context, words in [
        ({"options": {"foreach": True}}, "options ['foreach'] are the native class's"),
        ({"own_compile": False}, "compile=False is not the own engine"),
        ({"own_compile": "inductor"}, "compile='inductor' is not the own engine"),
        ({"dtypes": ("complex64", "float32")}, "parameters of dtype complex64"),
        ({"sharded": ("w",)}, "DTensor parameters ['w']"),
        ({"device": "cpu,cuda"}, "parameters on several devices"),
    ]:
        decision = _decide("torch", spec, elements=2**22, **context)
        assert decision.path == "native", context
        assert words in decision.reason and "does not cover" in decision.reason
    for compile_mode in ("auto", True):
        assert _decide("torch", spec, elements=2**22, own_compile=compile_mode).path == "own"
    # bfloat16 parameters: no native row computes their rounded update, so the own path
    low = _decide("torch", spec, elements=2**22, dtypes=("bfloat16", "float32"))
    assert low.path == "own" and "these are bfloat16" in str(low)


def test_without_the_fast_engine_the_table_does_not_apply(table, monkeypatch):
    from unified_opt.kernels import build as kernels

    table += [_row("torch", "cpu", "adafactor", "torch.optim.Adafactor"),
              _row("torch", "cuda", "adafactor", "torch.optim.Adafactor")]

    def no_vm():
        raise kernels.KernelUnavailable("no C++ compiler: 'c++' is not on PATH (set CXX)")

    monkeypatch.setattr(kernels, "load", no_vm)
    decision = _decide("torch", uo.Adafactor(), elements=2**22)
    assert decision.path == "native" and decision.native == "torch.optim.Adafactor"
    assert "the kernel VM is not available here (no C++ compiler" in decision.reason
    assert "does not apply" in decision.reason
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else real(name, *a))
    on_cuda = _decide("torch", uo.Adafactor(), elements=2**22, device="cuda")
    assert on_cuda.path == "native" and "Triton is not installed" in on_cuda.reason


def test_the_cuda_row_takes_the_triton_kernels_where_triton_is_installed():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    decision = _decide("torch", uo.Adafactor(lr=1e-3), device="cuda", elements=124439808)
    assert decision.path == "own" and decision.alternative == "torch.optim.Adafactor"
    assert f"measured on {_committed_gpu()} (GPT-2 small)" in decision.reason
    assert "benchmarks/results/gpu_step_time.json" in decision.reason
    fused = _decide("torch", uo.AdamW(lr=1e-3, weight_decay=0.01), device="cuda",
                    elements=124439808)
    assert fused.path == "native" and "keeps torch.optim.AdamW" in fused.reason


# -- validation ----------------------------------------------------------------------------

@require("torch")
def test_prefer_is_validated_naming_it():
    import torch

    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(TypeError, match="build: prefer must be a str.*got 1 of type int"):
        uo.build(uo.Adam(), [p], prefer=1)
    with pytest.raises(ValueError, match=r"build: prefer must be one of \('speed', "
                                         r"'native'\), got 'fast'"):
        uo.build(uo.Adam(), [p], prefer="fast")
    with pytest.raises(ValueError, match="explain: prefer must be one of"):
        uo.explain(uo.Adam(), "torch", prefer="Speed")
    with pytest.raises(TypeError, match="explain: prefer must be a str"):
        uo.explain(uo.Adam(), "torch", prefer=None or 0)
    with pytest.raises(TypeError, match="explain: prefer is for a spec"):
        uo.explain(uo.build(uo.Adam(), [p]), prefer="native")
    with pytest.raises(ValueError, match="decide: prefer must be one of"):
        load("torch").decide(uo.Adam(), "auto", Context(), "fastest")


# -- the issue's rows on every backend -------------------------------------------------------

def _params(backend, shape=LARGE):
    array = np.zeros(shape, np.float32)
    if backend == "torch":
        import torch
        return [("w", torch.nn.Parameter(torch.from_numpy(array)))]
    if backend == "paddle":
        import paddle
        return [("w", paddle.create_parameter(
            shape=list(shape), dtype="float32",
            default_initializer=paddle.nn.initializer.Assign(array)))]
    import mindspore as ms
    return [("w", ms.Parameter(ms.Tensor(array), name="w"))]


def _class_name(optimizer) -> str:
    return f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"


def _issue_row(backend):
    for spec, native in [(s, n) for b, s, n in ISSUE_ROWS if b == backend]:
        built = uo.build(spec, _params(backend))
        decision = uo.explain(built)
        assert decision.path == "own" and decision.alternative == native
        assert decision.prefer == "speed"
        assert decision.measured.ratio >= speed.THRESHOLD
        assert decision.measured.size_class == "large"
        assert f"{decision.measured.ratio:g}x faster than {native}" in decision.reason
        assert "measured on" in decision.reason and "native_vs_own.json" in decision.reason
        assert "uo_vm" not in _class_name(built) and "SpecOptimizer" in _class_name(built)
        # the spec alone explains the same choice (for the large class, said so)
        alone = uo.explain(spec, backend)
        assert alone.path == "own" and alone.alternative == native
        # prefer="native": the framework's class, as before
        kept = uo.build(spec, _params(backend), prefer="native")
        assert _class_name(kept) == native or uo.explain(kept).native == native
        assert uo.explain(kept).path == "native" and uo.explain(kept).prefer == "native"
        assert uo.explain(spec, backend, prefer="native").native == native


@require("torch")
def test_torch_adafactor_defaults_to_the_own_path():
    _issue_row("torch")


@require("paddle")
def test_paddle_lamb_defaults_to_the_own_path():
    _issue_row("paddle")


@require("mindspore")
def test_mindspore_adam_and_adamw_default_to_the_own_path():
    _issue_row("mindspore")


@require("mindspore")
def test_mindspore_graph_mode_reads_its_own_rows():
    import mindspore as ms

    before = ms.get_context("mode")
    try:
        ms.set_context(mode=ms.GRAPH_MODE)
        assert speed.table_backend("mindspore") == "mindspore-graph"
        decision = uo.explain(uo.AdamW(lr=1e-3, weight_decay=0.01), "mindspore")
        assert decision.path == "own" and decision.measured.backend == "mindspore-graph"
    finally:
        ms.set_context(mode=before)
    assert speed.table_backend("mindspore") == "mindspore"


def _slow_row(backend):
    """A measured row of ``backend`` where the own path is not 1.5x faster at the large
    class: (spec, native class)."""
    from unified_opt.expressions import parse_spec

    specs = json.loads((ROOT / "benchmarks" / "results" / "native_vs_own.json").read_text())
    for r in specs["rows"]:
        if r["backend"] == backend and r.get("size_class") == "large" and \
                "error" not in r and r["native_ms"] / r["own_ms"] < 1.4:
            return parse_spec(r["expression"]), r["native"]
    pytest.skip(f"every measured {backend} row is at least 1.4x faster on the own path")


@pytest.mark.parametrize("backend", ["torch", "paddle", "mindspore"])
def test_a_row_under_one_and_a_half_keeps_the_native_class(backend):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    spec, native = _slow_row(backend)
    decision = uo.explain(uo.build(spec, _params(backend)))
    assert (decision.path, decision.native) == ("native", native)
    assert decision.alternative == "own implementation" and decision.measured is not None
    assert f"keeps {native}: the own implementation is not 1.5x faster" in decision.reason


# -- conformance: the native rows stay covered ------------------------------------------------

def test_the_worker_runs_native_where_auto_took_the_own_path_over_an_exact_class():
    from unified_opt.backend import Decision
    from unified_opt.conformance.worker import _NOT_RUN, native_skip

    over = Decision("torch", "adamw", "own", None, "faster", alternative="torch.optim.AdamW")
    only = Decision("torch", "lion", "own", None, "no native class")
    native = Decision("torch", "adamw", "native", "torch.optim.AdamW", "exact")
    assert native_skip("native", over) == ""
    assert native_skip("native", only) == "no native class computes it exactly"
    assert native_skip("native", native) == ""          # the caller skips: same as auto
    assert native_skip("native", None) == "the auto build failed"
    assert native_skip("native", _NOT_RUN) == ""        # no auto path: run as asked
    assert native_skip("own", only) == ""
    assert native_skip("native", {"path": "own"}) == "no native class computes it exactly"
    from unified_opt.conformance.cases import DEFAULT_PATHS

    assert DEFAULT_PATHS == ("auto", "own", "native")


@require("mindspore")
def test_conformance_runs_the_native_class_the_default_build_replaced(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "report"
    run = subprocess.run([sys.executable, "-m", "unified_opt.cli", "conformance",
                          "--backends", "mindspore", "--cases",
                          "adamw_default,lion_default", "--out", str(out), "--verbose"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((out / "report.json").read_text())
    runs = {(r["case"], r["path"]): r["lowering"] for r in report["results"]}
    assert set(runs) == {("adamw_default", "auto"), ("adamw_default", "native"),
                         ("lion_default", "auto")}
    assert runs[("adamw_default", "auto")]["path"] == "own"
    assert runs[("adamw_default", "native")]["native"] == "mindspore.experimental.optim.AdamW"
    assert "lion_default native skipped (no native class computes it exactly)" in run.stdout
    assert "adamw_default own skipped (same as auto)" in run.stdout
    assert not report["unexercised_lowering_rows"].get("mindspore") or \
        "adamw -> mindspore.experimental.optim.AdamW" not in \
        report["unexercised_lowering_rows"]["mindspore"]


# -- porting: which class, and why ------------------------------------------------------------

def test_port_says_which_class_it_produces_and_why():
    from unified_opt.porting.script import port_source

    # a Paddle or MindSpore script's construction is read into a spec and written as a class
    # or uo.build (a torch script keeps uo.build(uo.preset(...)): decided at run time)
    script = ("import paddle\nopt = paddle.optimizer.AdamW(learning_rate=1e-3, "
              "parameters=m.parameters())\n")
    ported = port_source(script, "mindspore")
    assert "uo.build(uo.AdamW(" in ported.source
    reasons = ported.rewrites[0].reasons
    assert "own implementation" in reasons
    assert "faster than mindspore.experimental.optim.AdamW" in reasons
    # a class the table keeps is written as the class, saying the ratio it beat
    sgd = port_source("from mindspore import nn\n"
                      "opt = nn.SGD(m.trainable_params(), learning_rate=0.1)\n", "paddle")
    assert "paddle.optimizer.SGD(" in sgd.source
    assert "-> native" in sgd.rewrites[0].reasons
    assert "keeps paddle.optimizer.SGD" in sgd.rewrites[0].reasons


@require("torch")
def test_resume_names_the_class_it_built(tmp_path):
    import torch

    params = _params("torch")
    opt = uo.build(uo.Adafactor(lr=1e-3), params, prefer="native")
    params[0][1].grad = torch.ones(LARGE)
    opt.step()
    uo.save_state(opt, tmp_path / "run.safetensors")
    resumed = uo.resume(tmp_path / "run.safetensors", _params("torch"))
    decision = uo.explain(resumed)
    assert decision.path == "own" and decision.alternative == "torch.optim.Adafactor"
    kept = uo.resume(tmp_path / "run.safetensors", _params("torch"), prefer="native")
    assert uo.explain(kept).native == "torch.optim.Adafactor"
