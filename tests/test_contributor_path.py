"""The contributor path (docs/contributing.md): an algorithm is its spec module and its
record (:mod:`unified_opt.records`), with no list to extend elsewhere.

A toy algorithm is registered from outside the package, through the environment
variable the entry points share their loader with (``UNIFIED_OPT_ALGORITHMS``), and gets,
with nothing else written: the registry and ``uo.<class>``, the conformance suite (its
cases and the derived non-finite case, on every installed backend, on the own path), its
planted deviation flagged by ``check``, and an API page. Each run is a process of its own
(one framework per process; the plug-in is loaded there from the environment, as the
suite's workers load it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import require

import unified_opt as uo
from unified_opt.records import CaseSketch, Planted, record, record_of, records

ROOT = Path(__file__).resolve().parents[1]

TOY = '''
r"""A toy update: heavy-ball momentum, stepped by its sign.

.. math::

    m_t = \\beta m_{t-1} + g_t, \\qquad \\theta_t = \\theta_{t-1} - \\eta\\,\\mathrm{sign}(m_t)

Args:
    beta: the momentum's decay, in [0, 1).

Differences between frameworks
------------------------------
* No framework ships it: every backend runs this update (own implementation).
"""

from unified_opt import _validation as v
from unified_opt.records import CaseSketch, Planted, record
from unified_opt.spec import Spec, register, spec_dataclass


@register
@spec_dataclass
class ToySignMomentum(Spec):
    __doc__ = __doc__
    name = "toy_sign_momentum"

    lr: float = 0.01
    beta: float = 0.9

    def _check(self, owner):
        return {"beta": v.check_range(owner, "beta", self.beta, low=0.0, high=1.0,
                                      high_open=True)}

    def state_names(self):
        return ("momentum",)

    def update(self, param, grad, state, *, lr, step, ops):
        momentum = state["momentum"] * self.beta + grad
        return param - ops.sign(momentum) * lr, {"momentum": momentum}


RECORD = record(
    ToySignMomentum,
    samples=(ToySignMomentum(lr=0.01),),
    planted=(Planted(ToySignMomentum(lr=0.01), {"beta": 0.5}),),
    cases=(CaseSketch("toy_sign_momentum_default", ToySignMomentum(lr=0.01)),),
)
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The environment of a process that has the toy algorithm."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "toy_sign_momentum.py").write_text(TOY)
    env = dict(os.environ, UNIFIED_OPT_ALGORITHMS="toy_sign_momentum",
               PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    return env


def _run(args, env, timeout=600):
    done = subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_plugin_is_in_the_registry_and_the_package(plugin):
    out = _run(["-c", textwrap.dedent("""
        import json, unified_opt as uo
        from unified_opt.records import records
        spec = uo.get("toy_sign_momentum", lr=0.5)
        print(json.dumps({"listed": "toy_sign_momentum" in uo.algorithms(),
                          "class": uo.ToySignMomentum.__name__, "lr": spec.lr,
                          "cases": [c.id for c in records()["toy_sign_momentum"].cases],
                          "round_trip": uo.spec_from_dict(spec.to_dict()) == spec}))
        """)], plugin)
    assert json.loads(out) == {"listed": True, "class": "ToySignMomentum", "lr": 0.5,
                               "cases": ["toy_sign_momentum_default"], "round_trip": True}


def test_the_suite_runs_it_on_every_backend_on_the_own_path(plugin, tmp_path):
    _run(["-m", "unified_opt.cli", "conformance", "--algorithms", "toy_sign_momentum",
          "--out", str(tmp_path)], plugin)
    report = json.loads((tmp_path / "report.json").read_text())
    ran = {(r["case"], r["backend"]): (r["status"], r["lowering"]["path"])
           for r in report["results"] if r["status"] != "skipped"}
    expected = {(case, backend): ("pass", "own") for backend in uo.backends()
                for case in ("toy_sign_momentum_default", "nonfinite_toy_sign_momentum")}
    assert ran == expected
    assert set(uo.backends()) == {"torch", "paddle", "mindspore"}   # CI installs all three


@require("torch")
def test_its_planted_deviation_is_flagged(plugin):
    out = _run(["-c", textwrap.dedent("""
        import json, unified_opt as uo
        from unified_opt.records import records
        entry = records()["toy_sign_momentum"]
        results = {}
        for planted in entry.planted:
            own = lambda ps: uo.build(planted.spec, ps, path="own")
            right = uo.conformance.check(own, planted.spec, backend="torch")
            wrong = uo.conformance.check(own, planted.spec.replace(**planted.wrong),
                                         backend="torch")
            results[str(planted.wrong)] = [right.passed, wrong.passed]
        print(json.dumps(results))
        """)], plugin)
    assert json.loads(out.strip().splitlines()[-1]) == {"{'beta': 0.5}": [True, False]}


def test_it_gets_an_api_page(plugin, tmp_path):
    _run([str(ROOT / "docs" / "api_pages.py"), str(tmp_path)], plugin)
    page = (tmp_path / "uo.ToySignMomentum.rst").read_text()
    assert "ToySignMomentum" in page
    assert "uo.ToySignMomentum" in (tmp_path / "index.rst").read_text()


def test_a_module_that_does_not_import_is_named(tmp_path):
    env = dict(os.environ, UNIFIED_OPT_ALGORITHMS="no_such_algorithm_module")
    done = subprocess.run([sys.executable, "-c", "import unified_opt as uo; uo.algorithms()"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "the algorithm module 'no_such_algorithm_module'" in done.stderr


# -- the record's checks, in this process ---------------------------------------------

def test_every_algorithm_has_a_record():
    assert sorted(records()) == uo.algorithms()
    for name, entry in records().items():
        assert entry.cases or entry.case_module, name


def test_a_wrong_record_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="'lion' has a record already"):
        record(uo.Lion, samples=(uo.Lion(),), cases=(CaseSketch("x", uo.Lion()),))
    with pytest.raises(TypeError, match="samples must hold Lion specs"):
        record(uo.Lion, samples=(uo.Adam(),))
    with pytest.raises(TypeError, match="spec_class must be a Spec subclass"):
        record(int, samples=())                         # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a planted deviation must be of a sample"):
        record(uo.Adan, samples=(uo.Adan(),), planted=(Planted(uo.Adan(lr=0.5), {}),))
    with pytest.raises(ValueError, match="beta"):       # the wrong knobs are checked too
        record(uo.Adan, samples=(uo.Adan(),),
               planted=(Planted(uo.Adan(), {"betas": (2.0, 0.9, 0.9)}),))
    with pytest.raises(ValueError, match="has no record"):
        record_of("no such algorithm")
