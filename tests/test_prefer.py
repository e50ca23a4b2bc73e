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
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt import speed
from unified_opt.backend import Context, load

ROOT = Path(__file__).resolve().parents[1]
#: one parameter of 2**21 elements
LARGE = (1024, 2048)
#: the committed CPU results the table's CPU rows come from
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "realistic_sets.json").read_text())


def _script():
    loaded = importlib.util.spec_from_file_location("speed_table_script",
                                                    ROOT / "benchmarks" / "speed_table.py")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


#: the test table's sets: a large model and a small one
BIG = speed.SetModel(4198400, 8, 0.0, 0.001)
TINY = speed.SetModel(1040, 2, 0.0, 0.0154)


def _row(backend, device, algorithm, native, model=BIG, ratio=3.0, threads=1,
         set_name=None):
    return {"backend": backend, "device": device, "threads": threads if device == "cpu"
            else None, "algorithm": algorithm, "native": native,
            "set": set_name or ("big" if model == BIG else "tiny"), "model": model.to_dict(),
            "native_ms": 3.0 * ratio, "own_ms": 3.0, "native_over_own": ratio,
            "source": "cpu", "measured": "test"}


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


def test_the_table_holds_every_measured_cpu_row_and_the_cuda_rows():
    data = speed.table()
    assert set(data["sources"]) == {"cpu", "cuda"}
    assert data["sources"]["cpu"]["file"] == "benchmarks/results/realistic_sets.json"
    assert data["sources"]["cuda"]["machine"] == f"{_committed_gpu()} (GPT-2 small)"
    keys = {(r["backend"], r["device"], r["threads"], r["algorithm"], r["native"], r["set"]): r
            for r in data["rows"]}
    measured = [r for r in RESULTS["rows"] if "error" not in r and r.get("native")]
    assert len(measured) == sum(1 for r in data["rows"] if r["device"] == "cpu")
    for r in measured:
        row = keys[(r["backend"], "cpu", r["threads"], r["algorithm"], r["native"], r["set"])]
        assert (row["native_ms"], row["own_ms"]) == (r["native_ms"], r["own_ms"])
        assert row["native_over_own"] == round(r["native_ms"] / r["own_ms"], 2)
        assert row["model"]["tensors"] == (r.get("model") or RESULTS["sets"][r["set"]])[
            "tensors"]
    # CUDA, GPT-2 small on the committed GPU: torch's Adafactor against the Triton kernels
    cuda = keys[("torch", "cuda", None, "adafactor", "torch.optim.Adafactor", "GPT-2 small")]
    assert cuda["native_over_own"] >= speed.THRESHOLD
    assert cuda["model"] == {"elements": 124439808, "tensors": 148, "conv_share": 0.0,
                             "vector_share": 0.0}
    # and fused AdamW stays: the own path is not 1.1x faster there
    assert keys[("torch", "cuda", None, "adamw", "torch.optim.AdamW", "GPT-2 small")][
        "native_over_own"] < speed.THRESHOLD


def test_size_classes():
    assert speed.size_class(0) == "small"
    assert speed.size_class(65535) == "small"
    assert speed.size_class(65536) == "medium"
    assert speed.size_class(2**21 - 1) == "medium"
    assert speed.size_class(2**21) == "large"
    assert [speed.size_class(4 * d * d + 4 * d) for d in speed.REPRESENTATIVE] == \
        ["small", "medium", "large"]


def test_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert speed.threads() == 3
    for unset in ("", "0", "x"):
        monkeypatch.setenv("OMP_NUM_THREADS", unset)
        assert speed.threads() == (os.cpu_count() or 1)


# -- the rule ------------------------------------------------------------------------------

def _decide(backend, spec, prefer="speed", **context):
    return load(backend).decide(spec, "auto", Context(**context), prefer)


def test_the_rule_own_where_measured_faster_the_class_otherwise(table, monkeypatch):
    monkeypatch.setattr(speed, "fast_engine", lambda device: "")
    monkeypatch.setattr(speed, "threads", lambda: 1)
    table += [_row("torch", "cpu", "adamw", "torch.optim.AdamW", BIG, 3.0),
              _row("torch", "cpu", "adamw", "torch.optim.AdamW", TINY, 1.09),
              _row("torch", "cpu", "adamw", "torch.optim.AdamW", BIG, 0.5, threads=2)]
    spec = uo.AdamW(lr=1e-3, weight_decay=0.01)
    big = ((1024, 1024), (1024,)) * 4
    fast = _decide("torch", spec, shapes=big)
    assert (fast.path, fast.alternative, fast.prefer) == ("own", "torch.optim.AdamW", "speed")
    assert fast.measured.ratio == 3.0 and fast.measured.set == "big"
    assert fast.measured.distance == pytest.approx(0.0, abs=1e-3)
    assert "3x faster than torch.optim.AdamW" in fast.reason
    assert "the big set (8 tensors, 4,198,400 elements, 0% in conv weights" in fast.reason
    assert "torch on cpu, 1 thread," in fast.reason
    assert "measured on a test machine, benchmarks/results/test.json" in fast.reason
    assert "prefer='native' builds torch.optim.AdamW" in fast.reason
    text = str(fast)
    assert text.splitlines()[0].startswith("torch: adamw -> own implementation")
    assert "alternative: torch.optim.AdamW (3x: native 9 ms, own 3 ms per step)" in text
    # under 1.1x: the class, saying what was measured
    slow = _decide("torch", spec, shapes=((32, 32), (16,)))
    assert (slow.path, slow.native, slow.alternative) == \
        ("native", "torch.optim.AdamW", "own implementation")
    assert "keeps torch.optim.AdamW: the own implementation is not 1.1x faster" in slow.reason
    assert "1.09x" in slow.reason and "the tiny set" in slow.reason
    # a set between the two: the nearest by the model's distance, said with the distance
    conv = _decide("torch", spec, shapes=((512, 512, 3, 3),) * 2)    # 4.7 M, all conv
    assert conv.measured.set == "big" and conv.path == "own"
    assert conv.measured.distance == pytest.approx(
        BIG.distance(speed.SetModel.of(((512, 512, 3, 3),) * 2)))
    assert "the measured set nearest this build's (2 tensors, 4,718,592 elements, 100% in " \
        "conv weights" in conv.reason
    # two threads: that thread count's row
    monkeypatch.setattr(speed, "threads", lambda: 2)
    two = _decide("torch", spec, shapes=big)
    assert two.path == "native" and two.measured.threads == 2 and "0.5x" in two.reason
    # the nearest set first, then its nearest thread count: tiny was measured on 1 only
    assert _decide("torch", spec, shapes=((32, 32), (16,))).measured.threads == 1
    monkeypatch.setattr(speed, "threads", lambda: 8)        # more threads than measured
    assert _decide("torch", spec, shapes=big).measured.threads == 2
    monkeypatch.setattr(speed, "threads", lambda: 1)
    # no parameters (explain of a spec): the largest measured set, said so
    unsized = _decide("torch", spec)
    assert unsized.path == "own" and unsized.measured.set == "big" \
        and "the largest measured set: no parameters given" in unsized.reason
    # prefer="native": the class, as before, nothing measured read
    native = _decide("torch", spec, prefer="native", shapes=big)
    assert (native.path, native.alternative, native.measured) == \
        ("native", None, None)
    # no row for this device: the class
    other = _decide("torch", spec, shapes=big, device="cuda")
    assert other.path == "native" and "no measurement of torch.optim.AdamW" in other.reason


def test_what_the_measurement_does_not_cover_keeps_the_class(table, monkeypatch):
    monkeypatch.setattr(speed, "fast_engine", lambda device: "")
    table.append(_row("torch", "cpu", "adamw", "torch.optim.AdamW", BIG, 3.0))
    spec = uo.AdamW(lr=1e-3, weight_decay=0.01)
    for context, words in [
        ({"options": {"foreach": True}}, "options ['foreach'] are the native class's"),
        ({"own_compile": False}, "compile=False is not the own engine"),
        ({"own_compile": "inductor"}, "compile='inductor' is not the own engine"),
        ({"dtypes": ("complex64", "float32")}, "parameters of dtype complex64"),
        ({"sharded": ("w",)}, "DTensor parameters ['w']"),
        ({"device": "cpu,cuda"}, "parameters on several devices"),
    ]:
        decision = _decide("torch", spec, shapes=((2048, 2048),), **context)
        assert decision.path == "native", context
        assert words in decision.reason and "does not cover" in decision.reason
    for compile_mode in ("auto", True):
        assert _decide("torch", spec, shapes=((2048, 2048),),
                       own_compile=compile_mode).path == "own"
    # bfloat16 parameters: no native row computes their rounded update, so the own path
    low = _decide("torch", spec, shapes=((2048, 2048),), dtypes=("bfloat16", "float32"))
    assert low.path == "own" and "these are bfloat16" in str(low)


def test_without_the_fast_engine_the_table_does_not_apply(table, monkeypatch):
    from unified_opt.kernels import build as kernels

    table += [_row("torch", "cpu", "adafactor", "torch.optim.Adafactor"),
              _row("torch", "cuda", "adafactor", "torch.optim.Adafactor", set_name="gpt")]

    def no_vm():
        raise kernels.KernelUnavailable("no C++ compiler: 'c++' is not on PATH (set CXX)")

    monkeypatch.setattr(kernels, "load", no_vm)
    decision = _decide("torch", uo.Adafactor(), shapes=((2048, 2048),))
    assert decision.path == "native" and decision.native == "torch.optim.Adafactor"
    assert "the kernel VM is not available here (no C++ compiler" in decision.reason
    assert "does not apply" in decision.reason
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else real(name, *a))
    on_cuda = _decide("torch", uo.Adafactor(), shapes=((2048, 2048),), device="cuda")
    assert on_cuda.path == "native" and "Triton is not installed" in on_cuda.reason


def test_the_cuda_row_takes_the_triton_kernels_where_triton_is_installed():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    decision = _decide("torch", uo.Adafactor(lr=1e-3), device="cuda")
    assert decision.path == "own" and decision.alternative == "torch.optim.Adafactor"
    assert f"measured on {_committed_gpu()} (GPT-2 small)" in decision.reason
    assert "benchmarks/results/gpu_step_time.json" in decision.reason
    fused = _decide("torch", uo.AdamW(lr=1e-3, weight_decay=0.01), device="cuda")
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


# -- the rows on every backend -------------------------------------------------------

def _params(backend, shape=LARGE):
    return _set_params(backend, [shape])


def _set_params(backend, shapes):
    """Zero float32 parameters of ``shapes`` on ``backend``, named p0, p1, ..."""
    out = []
    for i, shape in enumerate(shapes):
        array = np.zeros(shape, np.float32)
        if backend == "torch":
            import torch
            out.append((f"p{i}", torch.nn.Parameter(torch.from_numpy(array))))
        elif backend == "paddle":
            import paddle
            out.append((f"p{i}", paddle.create_parameter(
                shape=list(shape), dtype="float32",
                default_initializer=paddle.nn.initializer.Assign(array))))
        else:
            import mindspore as ms
            out.append((f"p{i}", ms.Parameter(ms.Tensor(array), name=f"p{i}")))
    return out


def _class_name(optimizer) -> str:
    return f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"


def _measured_row(backend, own: bool):
    """A committed 1-thread row of ``backend`` whose set the default builds on the own
    path (``own``) or on the class, the smallest set first: (spec, row)."""
    from unified_opt.expressions import parse_spec

    sizes = {name: info["elements"] for name, info in RESULTS["sets"].items()}
    rows = sorted((r for r in RESULTS["rows"] if r["backend"] == backend and
                   r["threads"] == 1 and "error" not in r and r.get("native") and
                   not r["expression"].startswith("uo.preset(") and
                   (round(r["native_ms"] / r["own_ms"], 2) >= speed.THRESHOLD) == own),
                  key=lambda r: (sizes[r["set"]], r["key"]))
    if not rows:
        pytest.skip(f"no committed {backend} row where the default takes "
                    f"{'the own path' if own else 'the class'}")
    return parse_spec(rows[0]["expression"]), rows[0]


def _defaults_follow_the_measured_set(backend, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")     # the 1-thread rows
    for own in (True, False):
        spec, row = _measured_row(backend, own)
        native = row["native"]
        shapes = [tuple(s) for s in RESULTS["sets"][row["set"]]["shapes"]]
        built = uo.build(spec, _set_params(backend, shapes))
        decision = uo.explain(built)
        assert decision.prefer == "speed" and decision.measured.set == row["set"]
        assert decision.measured.threads == 1 and decision.measured.distance < 1e-3
        assert (decision.measured.native_ms, decision.measured.own_ms) == \
            (row["native_ms"], row["own_ms"])
        assert "measured on" in decision.reason and "realistic_sets.json" in decision.reason
        if own:
            assert decision.path == "own" and decision.alternative == native
            assert f"{decision.measured.ratio:g}x faster than {native}" in decision.reason
            assert "uo_vm" not in _class_name(built) and "SpecOptimizer" in _class_name(built)
            # prefer="native": the framework's class, as before
            kept = uo.build(spec, _set_params(backend, shapes), prefer="native")
            assert uo.explain(kept).path == "native" and uo.explain(kept).native == native
            assert uo.explain(kept).prefer == "native"
        else:
            assert (decision.path, decision.native) == ("native", native)
            assert decision.alternative == "own implementation"
            assert f"keeps {native}: the own implementation is not 1.1x faster" \
                in decision.reason
        # the spec alone: the largest measured set's row, said so
        alone = uo.explain(spec, backend)
        largest = max(RESULTS["sets"], key=lambda n: RESULTS["sets"][n]["elements"])
        assert alone.measured.set == largest and "no parameters given" in alone.reason
        assert uo.explain(spec, backend, prefer="native").native == native


@require("torch")
def test_torch_defaults_follow_the_measured_set(monkeypatch):
    _defaults_follow_the_measured_set("torch", monkeypatch)


@require("paddle")
def test_paddle_defaults_follow_the_measured_set(monkeypatch):
    _defaults_follow_the_measured_set("paddle", monkeypatch)


@require("mindspore")
def test_mindspore_defaults_follow_the_measured_set(monkeypatch):
    _defaults_follow_the_measured_set("mindspore", monkeypatch)


@require("mindspore")
def test_mindspore_graph_mode_reads_its_own_rows():
    import mindspore as ms

    graph_rows = [r for r in speed.table()["rows"] if r["backend"] == "mindspore-graph"]
    before = ms.get_context("mode")
    try:
        ms.set_context(mode=ms.GRAPH_MODE)
        assert speed.table_backend("mindspore") == "mindspore-graph"
        decision = uo.explain(uo.AdamW(lr=1e-3, weight_decay=0.01), "mindspore")
        # measured in GRAPH_MODE (realistic_sets' mindspore-graph rows): the own path, as
        # mindspore.experimental.optim.AdamW is many times slower there; without them
        # every GRAPH_MODE build kept that class, "no measurement"
        assert graph_rows
        assert decision.measured.backend == "mindspore-graph"
        assert decision.path == "own" and decision.measured.ratio >= speed.THRESHOLD, \
            decision.reason
    finally:
        ms.set_context(mode=before)
    assert speed.table_backend("mindspore") == "mindspore"


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

def _writes(ported, decision) -> None:
    """The ported line is what ``decision`` says, and its reasons say why."""
    reasons = ported.rewrites[0].reasons
    if decision.path == "own":
        assert f"uo.build(uo.{type(uo.get(decision.algorithm)).__name__}(" in ported.source
        assert "own implementation" in reasons
        assert f"faster than {decision.alternative}" in reasons
    else:
        assert f"{decision.native.rsplit('.', 1)[-1]}(" in ported.source
        assert "-> native" in reasons and f"keeps {decision.native}" in reasons


def test_port_says_which_class_it_produces_and_why():
    from unified_opt.porting.script import port_source

    # a Paddle or MindSpore script's construction is read into a spec and written as a class
    # or uo.build (a torch script keeps uo.build(uo.preset(...)): decided at run time), as
    # uo.explain decides for the spec without parameters (the largest measured set)
    script = ("import paddle\nopt = paddle.optimizer.AdamW(learning_rate=1e-3, "
              "parameters=m.parameters())\n")
    decision = uo.explain(uo.preset("paddle.optimizer.AdamW", learning_rate=1e-3),
                          "mindspore")
    assert decision.measured is not None and decision.measured.set == "gpt2"
    _writes(port_source(script, "mindspore"), decision)
    sgd = port_source("from mindspore import nn\n"
                      "opt = nn.SGD(m.trainable_params(), learning_rate=0.1)\n", "paddle")
    _writes(sgd, uo.explain(uo.preset("mindspore.nn.SGD", learning_rate=0.1), "paddle"))


@require("torch")
def test_resume_names_the_class_it_built(tmp_path):
    import torch

    params = _params("torch")
    opt = uo.build(uo.Adafactor(lr=1e-3), params, prefer="native")
    params[0][1].grad = torch.ones(LARGE)
    opt.step()
    uo.save_state(opt, tmp_path / "run.safetensors")
    # the default build over these parameters, as resume makes it
    default = uo.explain(uo.build(uo.Adafactor(lr=1e-3), _params("torch")))
    assert default.measured is not None and default.measured.set == "large"
    resumed = uo.resume(tmp_path / "run.safetensors", _params("torch"))
    decision = uo.explain(resumed)
    assert decision.path == default.path
    assert "torch.optim.Adafactor" in (decision.alternative, decision.native)
    kept = uo.resume(tmp_path / "run.safetensors", _params("torch"), prefer="native")
    assert uo.explain(kept).native == "torch.optim.Adafactor"
