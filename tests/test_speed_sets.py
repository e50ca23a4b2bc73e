"""``prefer="speed"`` over the measured realistic sets (``benchmarks/realistic_sets.py``
-> ``benchmarks/results/realistic_sets.json`` -> ``unified_opt/speed_table.json``): the
sets' shapes, the set model and its distance, the default never more than 10 % slower
than the other exact path on any measured set, every native preset measured.

Data only: no framework is imported (decisions are made without parameters'
framework objects, from shapes)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

import unified_opt as uo
from unified_opt import speed
from unified_opt.backend import Context, load

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "realistic_sets.json").read_text())
#: presets that wrap another optimizer or run on several ranks: no single-process row
WRAPPERS = {"mindspore.nn.LARS", "paddle.distributed.fleet.meta_optimizers.DGCMomentumOptimizer",
            "paddle.fluid.optimizer.DGCMomentumOptimizer"}


@pytest.fixture(scope="module")
def sets_script():
    """``benchmarks/realistic_sets.py`` as a module (its folder's modules importable)."""
    folder = str(ROOT / "benchmarks")
    sys.path.insert(0, folder)
    try:
        loaded = importlib.util.spec_from_file_location("realistic_sets_script",
                                                        ROOT / "benchmarks" /
                                                        "realistic_sets.py")
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(folder)


def test_the_sets_have_the_shapes_of_what_users_train(sets_script):
    gpt2 = sets_script.set_shapes("gpt2")
    assert (len(gpt2), speed.SetModel.of(gpt2).elements) == (76, 23240704)
    resnet = speed.SetModel.of(sets_script.set_shapes("resnet18"))
    assert (resnet.tensors, resnet.elements) == (62, 11689512)    # torchvision's ResNet-18
    assert sum(1 for s in sets_script.set_shapes("resnet18") if len(s) == 4) == 20
    assert round(resnet.conv_share, 4) == 0.9553 and round(resnet.vector_share, 4) == 0.0009
    assert sets_script.set_shapes("large") == [(4096, 4096)]
    # GPT-2 small at full width is the CUDA run's set: 148 tensors, 124,439,808 elements
    small = sets_script.gpt2_shapes(768, 12, 50257, 1024)
    assert (len(small), speed.SetModel.of(small).elements) == (148, 124439808)
    # the committed results hold these models
    for name in sets_script.SETS:
        model = speed.SetModel.of(sets_script.set_shapes(name)).to_dict()
        assert {k: RESULTS["sets"][name][k] for k in model} == model


def test_the_set_model_and_the_nearest_set():
    model = speed.SetModel.of([(64, 3, 7, 7), (64,), (10, 64)])
    assert model == speed.SetModel(10112, 3, 9408 / 10112, 64 / 10112)
    assert speed.SetModel.of([]) == speed.SetModel(0, 0, 0.0, 0.0)
    a, b = speed.SetModel(1000, 10, 0.5, 0.0), speed.SetModel(100000, 1, 0.0, 0.25)
    assert a.distance(b) == pytest.approx(2 + 1 + 0.5 + 0.25)
    assert a.distance(a) == 0
    sets = {name: speed.SetModel.from_dict(info) for name, info in RESULTS["sets"].items()}

    def nearest(m):
        return min(sets, key=lambda name: m.distance(sets[name]))

    # ResNet-50: 161 tensors, 25.6 M elements, mostly conv weights
    assert nearest(speed.SetModel(25557032, 161, 0.91, 0.002)) == "resnet18"
    # BERT-base: 199 tensors, 110 M elements, no conv weights
    assert nearest(speed.SetModel(109482240, 199, 0.0, 0.001)) == "gpt2"
    assert nearest(speed.SetModel.of([(2048, 2048)])) == "large"
    assert nearest(speed.SetModel.of([(128, 128), (128,)])) == "small"


#: each framework's name of the CPU, as its builds put it in the Context (MindSpore's
#: device_target "CPU"; torch's and Paddle's "cpu"): MindSpore's classes hold only on the
#: devices they were measured exact on, named so
CPU = {"torch": "cpu", "paddle": "cpu", "mindspore": "CPU", "mindspore-graph": "CPU"}
#: the table's CPU backends (``mindspore-graph``: MindSpore in GRAPH_MODE)
BACKENDS = ("torch", "paddle", "mindspore", "mindspore-graph")


def _rows():
    return [r for r in RESULTS["rows"] if "error" not in r and r.get("native")]


def test_the_results_measure_every_backend_set_and_thread_count():
    measured = {(r["backend"], r["set"], r["threads"]) for r in _rows()}
    for backend in BACKENDS:
        for name in RESULTS["sets"]:
            assert (backend, name, 1) in measured, (backend, name)
    assert not [r for r in RESULTS["rows"] if "error" in r], "a row failed to measure"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_default_is_never_more_than_10_percent_slower_on_any_measured_set(
        backend, monkeypatch):
    """For each measured set, thread count and native class: the decision for that set's
    model takes a path whose measured step is at most 1.1 x the other's (MindSpore's
    builds in GRAPH_MODE read the ``mindspore-graph`` rows)."""
    monkeypatch.setattr(speed, "fast_engine", lambda device: "")
    if backend == "mindspore-graph":
        monkeypatch.setattr(speed, "table_backend", lambda name: "mindspore-graph")
    adapter = load(backend.removesuffix("-graph"))
    checked = 0
    for r in [r for r in _rows() if r["backend"] == backend]:
        monkeypatch.setattr(speed, "threads", lambda n=r["threads"]: n)
        # a row over some of the set's tensors (Muon: its matrices) names them
        shapes = tuple(tuple(s) for s in r.get("shapes", RESULTS["sets"][r["set"]]["shapes"]))
        choice = speed.choose(backend, r["algorithm"], r["native"],
                              Context(device=CPU[backend], shapes=shapes))
        assert choice.measured is not None and choice.measured.set == r["set"], r
        assert choice.measured.threads == r["threads"] and choice.measured.distance < 1e-3
        taken, other = (r["own_ms"], r["native_ms"]) if choice.own else \
            (r["native_ms"], r["own_ms"])
        assert taken <= 1.1 * other, (r["set"], r["threads"], r["expression"], choice.text)
        # and a build of that spec decides the same (the spec's own lowering row)
        decision = adapter.decide(spec_of(r), "auto",
                                  Context(device=CPU[backend], shapes=shapes), "speed")
        assert decision.path == ("own" if choice.own else "native"), decision.reason
        checked += 1
    assert checked >= 4 * 9, f"only {checked} {backend} rows"


def spec_of(row):
    from unified_opt.expressions import parse_spec

    if row["expression"].startswith("uo.preset("):
        import ast

        call = ast.parse(row["expression"], mode="eval").body
        return uo.preset(ast.literal_eval(call.args[0]),
                         **{k.arg: ast.literal_eval(k.value) for k in call.keywords})
    return parse_spec(row["expression"])


def test_every_preset_with_a_native_class_is_measured(sets_script):
    table = speed.table()
    covered = {(r["backend"], r["algorithm"], r["native"], r["set"], r["threads"])
               for r in table["rows"] if r["device"] == "cpu"}
    thread_counts = sorted({r["threads"] for r in _rows()})
    # every set on one thread; on more, every set a backend was measured on with them
    measured = {(r["backend"], r["set"], r["threads"]) for r in _rows()}
    checked = []
    for name in uo.presets():
        backend = name.split(".")[0]
        if backend not in ("torch", "paddle", "mindspore"):
            continue
        try:
            spec = uo.preset(name, **sets_script.PRESET_ARGUMENTS.get(name, {}))
        except TypeError:
            assert name in WRAPPERS, f"{name}: give its required arguments in PRESET_ARGUMENTS"
            continue
        decision = load(backend).decide(spec, "auto", Context(), "native")
        if decision.path != "native" or spec.name in sets_script.SKIPPED:
            continue
        for set_name in sets_script.SETS:
            if (spec.name, set_name) in sets_script.NOT_MEASURED:
                continue
            for n in thread_counts:
                if n == 1 or (backend, set_name, n) in measured:
                    assert (backend, spec.name, decision.native, set_name, n) in covered, \
                        (name, decision.native, set_name, n)
        checked.append(name)
    assert "mindspore.nn.AdamWeightDecay" in checked and "paddle.optimizer.Lamb" in checked
    assert len(checked) >= 30


def test_the_docs_picture_and_table_are_current():
    loaded = importlib.util.spec_from_file_location("speed_plot", ROOT / "docs" /
                                                    "speed_plot.py")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    assert module.stale() == [], "run: python docs/speed_plot.py"
