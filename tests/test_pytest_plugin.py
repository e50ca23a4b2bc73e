"""The pytest plugin, as a project that installed unified-opt uses it: a fresh directory
outside this repository, pytest in a subprocess (the plugin loads through its
``pytest11`` entry point, nothing else points pytest at it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import require

PROJECT_TESTS = '''\
import torch
import unified_opt as uo


class MyLamb(torch.optim.Optimizer):
    """LAMB as a porting team writes it (bias-corrected moments, trust ratio 1 at a
    zero norm)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p),
                                 exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + group["eps"])
                u = u + group["weight_decay"] * p
                w_norm, u_norm = float(p.norm()), float(u.norm())
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                p.sub_(u * (group["lr"] * ratio))


def test_my_lamb(uo_check):
    uo_check(lambda params: MyLamb(params, lr=1e-3), uo.Lamb(lr=1e-3))


def test_torch_adam_is_not_eps_hat(uo_check):
    uo_check(lambda params: torch.optim.Adam(params, lr=1e-2, eps=1e-3),
             uo.Adam(lr=1e-2, eps=1e-3, eps_placement="eps_hat"))
'''


TEARDOWN_CRASH_CONFTEST = '''\
import unified_opt as uo
from unified_opt.conformance import cases
from unified_opt.conformance.cases.native import Native

TEARDOWN = cases.Case(id="teardown", spec=uo.SGD(lr=0.1), native=Native(
    "fault_optimizers.ExitAtProcessEnd", kwargs={"lr": 0.1}, framework="torch"))
cases.default_cases = lambda algorithms=None: [TEARDOWN.with_steps(50)]
'''


def _pytest(project, *args, timeout=600, pythonpath=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-rA", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=timeout)


@require("torch")
def test_uo_check_and_the_session_report_from_a_fresh_project(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_optim.py").write_text(PROJECT_TESTS)
    done = _pytest(project, "--uo-report", "uo-report")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "PASSED test_optim.py::test_my_lamb" in out
    assert "FAILED test_optim.py::test_torch_adam_is_not_eps_hat" in out
    assert "eps_placement='outside' follows this optimizer; the spec has 'eps_hat'" in out
    report = json.loads((project / "uo-report" / "report.json").read_text())
    by_test = {}
    for r in report["results"]:
        by_test.setdefault(r["case"].partition(".")[0], set()).add(r["status"])
    assert by_test == {"test_my_lamb": {"pass"}, "test_torch_adam_is_not_eps_hat": {"fail"}}
    # a check runs four streams (three adversarial, one quiet) and the non-finite one;
    # Lamb's has a sixth, of large weights (its trust ratio: issue 22)
    assert report["summary"]["total"] == 11 and report["summary"]["pass"] == 6
    assert (project / "uo-report" / "junit.xml").exists()


@require("torch")
def test_the_suite_runs_as_items_from_a_fresh_project(tmp_path):
    done = _pytest(tmp_path, "--uo-conformance", "--uo-backends", "torch", "--uo-cases",
                   "adam_default,adam_eps_hat", "-v")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    # adam_default lowers to torch.optim.Adam: own runs too; adam_eps_hat is own already
    assert "adam_default[torch-auto] PASSED" in out and "adam_default[torch-own] PASSED" in out
    assert "adam_eps_hat[torch-auto] PASSED" in out
    assert "adam_eps_hat[torch-own] SKIPPED" in out
    bad = _pytest(tmp_path, "--uo-conformance", "--uo-cases", "no_such_case")
    assert bad.returncode == 4 and "no case id matches" in bad.stdout + bad.stderr


@require("torch")
def test_a_worker_crashing_after_its_last_run_fails_the_session(tmp_path):
    """Every item passes, but the worker ended with exit status 3 (a crash at teardown,
    planted by ``fault_optimizers.ExitAtProcessEnd``): the session fails and says why."""
    (tmp_path / "conftest.py").write_text(TEARDOWN_CRASH_CONFTEST)
    done = _pytest(tmp_path, "--uo-conformance", "--uo-backends", "torch", "-v",
                   pythonpath=Path(__file__).parent)
    out = done.stdout + done.stderr
    assert "teardown[torch-hand] PASSED" in out, out
    assert "unified-opt conformance [torch]: the worker crashed with exit status 3 " \
           "outside any run" in out, out
    assert done.returncode == 1, out


def test_the_plugin_is_registered_for_pytest():
    from importlib.metadata import entry_points

    plugins = {e.name: e.value for e in entry_points(group="pytest11")}
    assert plugins.get("unified-opt") == "unified_opt.conformance.pytest_plugin"
