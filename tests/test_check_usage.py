"""``check`` and ``unified-opt check`` on what is not a conformance question (issue 22): a
factory that returns no optimizer of the backend or raises, a backend that is not
installed, a factory module importing another framework, a module in the current folder
are usage errors (exit 2) that name the factory and the fix; report.md of a check run
has its results; a failure's step is said once."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import require

import unified_opt as uo
from unified_opt.cli import main
from unified_opt.conformance import checker
from unified_opt.conformance.checker import FactoryError, check

ROOT = Path(__file__).parent.parent
SPEC = uo.Adam(lr=0.01, eps=1e-3)


def _module(tmp_path, text, name="my_factories"):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    return name


BAD = """\
    import torch

    def returns_none(params):
        return None

    def returns_list(params):
        return [torch.optim.Adam(params, lr=0.01)]

    def returns_model(params):
        return torch.nn.Linear(2, 2)

    def raises(params):
        raise RuntimeError("no GPU here")

    def returns_a_float_pair(params):
        return torch.optim.Adam(params, lr=0.01), 0.5

    def good(params):
        return torch.optim.Adam(params, lr=0.01, eps=1e-3)
    """


@require("torch")
@pytest.mark.parametrize("factory, words", [
    ("returns_none", "check: returns_none returned None, not a torch optimizer"),
    ("returns_list", "check: returns_list returned a list"),
    ("returns_model", "returned a torch.nn.Module (Linear), a model, not a torch optimizer"),
    ("raises", "check: raises raised RuntimeError: no GPU here (called with a list of 7 "
               "torch parameters"),
    # it ran, and failed every stream at the scheduler's step (exit 1)
    ("returns_a_float_pair", "check: returns_a_float_pair returned a pair whose second item, "
                             "float 0.5, is no lr scheduler (it has no step())"),
])
def test_a_bad_factory_is_a_usage_error(tmp_path, monkeypatch, capsys, factory, words):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(tmp_path, BAD)
    made = checker.load_factory(f"{module}:{factory}")
    with pytest.raises(FactoryError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check(made, SPEC, backend="torch")
    assert main(["check", f"{module}:{factory}", "--spec", "adam(lr=0.01, eps=1e-3)",
                 "--backend", "torch"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@require("torch")
@require("paddle")
def test_a_torch_factory_checked_on_paddle_is_a_usage_error(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _module(tmp_path, BAD)
    assert main(["check", f"{module}:good", "--spec", "adam(lr=0.01, eps=1e-3)",
                 "--backend", "paddle"]) == 2
    assert "check: good raised TypeError" in capsys.readouterr().err


def test_a_backend_that_is_not_installed_is_a_usage_error(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "paddle" else real(name, *a))
    with pytest.raises(ValueError, match="backend 'paddle' is not installed.*"
                                         r"pip install 'unified-opt\[paddle\]'"):
        check(lambda params: None, SPEC, backend="paddle")
    assert main(["check", "os:getcwd", "--spec", "adam()", "--backend", "paddle"]) == 2
    assert "paddle is not installed" in capsys.readouterr().err


@require("paddle")
@require("mindspore")
def test_a_factory_module_importing_paddle_checked_on_mindspore(tmp_path):
    """In a process of its own (import order matters); the module is found in the
    current folder, as python -m finds it."""
    _module(tmp_path, """\
        import paddle

        def make(params):
            return paddle.optimizer.Adam(parameters=params, learning_rate=0.01)
        """, name="paddle_factory")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import sys; from unified_opt.cli import "
                           "main; sys.exit(main(sys.argv[1:]))", "check",
                           "paddle_factory:make", "--spec", "adam(lr=0.01)", "--backend",
                           "mindspore"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "check: make" in done.stderr and "Traceback" not in done.stderr


@require("torch")
def test_a_module_in_the_current_folder_is_found(tmp_path, monkeypatch, capsys):
    _module(tmp_path, BAD, name="cwd_factories")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["check", "cwd_factories:good", "--spec", "adam(lr=0.01, eps=1e-3)",
                 "--backend", "torch", "--finite-only"]) == 0
    with pytest.raises(ValueError, match="run from the folder that holds it"):
        checker.load_factory("no_such_module_anywhere:f")


@require("torch")
def test_report_md_of_a_check_run_has_its_results_and_the_step_is_said_once(tmp_path):
    import torch

    result = check(lambda p: torch.optim.Adam(p, lr=0.01, eps=1e-3, amsgrad=True), SPEC,
                   backend="torch", out=tmp_path, nonfinite=False)
    assert not result.passed
    table = (tmp_path / "report.md").read_text()
    assert "| case | torch check |" in table
    assert "FAIL" in table and "(checked)" in table
    step = result.report["results"][0]["comparison"]["first_failing_step"]
    assert f"first failure at step {step}: " in result.explanation
    assert result.explanation.count(f"at step {step}") == 1, result.explanation
