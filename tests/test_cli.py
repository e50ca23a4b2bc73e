"""The command line's reading of values and specs (``unified_opt.expressions``), the
registry's case-insensitive names, ``unified-opt explain`` / ``matrix`` and their help."""

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import unified_opt as uo
from unified_opt import cli
from unified_opt.compatibility import markdown
from unified_opt.expressions import MAX_LENGTH, names, parse_spec, parse_value
from unified_opt.schedules import Cosine, LinearWarmup

ROOT = Path(__file__).resolve().parents[1]


# -- parse_value ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("True", True), ("False", False), ("None", None),
    ("true", True), ("false", False), ("null", None),          # JSON spellings, as before
    ("1e-3", 1e-3), ("-1e-3", -1e-3), ("+2.5", 2.5), ("-5", -5), ("0", 0), ("1_000", 1000),
    ("[0.9, 0.99]", [0.9, 0.99]), ("(0.9, 0.99)", (0.9, 0.99)), ("[]", []), ("(1,)", (1,)),
    ("'eps_hat'", "eps_hat"), ('"two words"', "two words"),
    ("eps_hat", "eps_hat"),              # a bare word is a string
    ("step", "step"),                    # lamb's bias_correction='step', not the Step schedule
    ("linear", "linear"), ("adamw", "adamw"),
    (" eps_hat ", "eps_hat"), ("", ""),
    ('{"a": [1, -2.0], "b": null}', {"a": [1, -2.0], "b": None}),
])
def test_parse_value_reads_literals(text, expected):
    value = parse_value(text)
    assert value == expected
    assert type(value) is type(expected)


def test_parse_value_reads_inf_and_nan():
    assert parse_value("inf") == math.inf
    assert parse_value("-inf") == -math.inf
    assert math.isnan(parse_value("nan"))


@pytest.mark.parametrize("text, expected", [
    ("Cosine(lr=0.1, T_max=100)", Cosine(lr=0.1, T_max=100)),
    ("cosine(lr=0.1, T_max=100)", Cosine(lr=0.1, T_max=100)),
    ("uo.schedules.Cosine(lr=0.1, T_max=100)", Cosine(lr=0.1, T_max=100)),
    ("LinearWarmup(after=Cosine(lr=0.1, T_max=90), warmup_steps=10)",
     LinearWarmup(after=Cosine(lr=0.1, T_max=90), warmup_steps=10)),
    ("linear_warmup(after=Cosine(lr=0.1, T_max=90), warmup_steps=10)",
     LinearWarmup(after=Cosine(lr=0.1, T_max=90), warmup_steps=10)),
    ("ClipByGlobalNorm(max_norm=1.0)", uo.ClipByGlobalNorm(max_norm=1.0)),
    ("ClipByGlobalNorm(1.0, eps=1e-6)", uo.ClipByGlobalNorm(max_norm=1.0, eps=1e-6)),
    ("uo.ClipByNorm(max_norm=2)", uo.ClipByNorm(max_norm=2.0)),
    ("ClipByValue(1.0, -0.5)", uo.ClipByValue(max=1.0, min=-0.5)),
    ("ClipByValue(max=3)", uo.ClipByValue(max=3.0)),
    ("AdamW(lr=1e-3, betas=(0.8, 0.9))", uo.AdamW(lr=1e-3, betas=(0.8, 0.9))),
    ("torch.optim.lr_scheduler.CosineAnnealingLR(base_lr=0.1, T_max=100)",
     uo.schedules.preset("torch.optim.lr_scheduler.CosineAnnealingLR", base_lr=0.1,
                         T_max=100)),
    ("paddle.optimizer.lr.StepDecay(0.1, 5)",            # native positional arguments
     uo.schedules.preset("paddle.optimizer.lr.StepDecay", learning_rate=0.1, step_size=5)),
])
def test_parse_value_calls_whitelisted_constructors(text, expected):
    value = parse_value(text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("text, fragment", [
    ("__import__('os')", "'__import__'"),
    ("os.system('ls')", "'os.system'"),
    ("eval('1')", "'eval'"),
    ("getattr(uo, 'AdamW')", "'getattr'"),
    ("AdamW.__class__", "attribute access 'AdamW.__class__'"),
    ("uo.AdamW.__init__(1)", "'uo.AdamW.__init__'"),
    ("Cosine(lr=0.1, T_max=10).value(1)", "other than a name"),
    ("adamw(lr=1)(2)", "other than a name"),
    ("lambda: 1", "a lambda"),
    ("[x for x in [1]]", "a comprehension"),
    ("{x: 1 for x in [1]}", "a comprehension"),
    ("[1][0]", "a subscript"),
    ("1 + 2", "an operator"),
    ("not True", "an operator"),
    ("-'a'", "a sign before a value that is not a number"),
    ("1 < 2", "a comparison"),
    ("1 if True else 2", "a conditional expression"),
    ("(x := 1)", "an assignment expression"),
    ("{1, 2}", "a set"),
    ("f'{1}'", "an f-string"),
    ("b'x'", "a bytes literal"),
    ("1j", "a complex number"),
    ("...", "the constant"),
    ("ClipByNorm(**{'max_norm': 1})", "** unpacking"),
    ("ClipByNorm(*[1])", "* unpacking"),
    ("{**{}}", "** unpacking"),
    ("ClipByNorm(max_norm=foo)", "the name 'foo'"),
    ("Cosin(lr=0.1, T_max=10)", "did you mean 'Cosine'"),
    ("torch.optim.Adamm(lr=1)", "did you mean 'torch.optim.Adam'"),
    ("ClipByGlobalNorm", "call it"),
    ("Cosine", "call it"),
    ("torch.optim.Adam", "call it"),
    ("eps-hat", "an operator"),
])
def test_parse_value_refuses_everything_else(text, fragment):
    with pytest.raises(ValueError) as info:
        parse_value(text)
    message = str(info.value)
    assert fragment in message
    assert "not allowed" in message
    assert "\n" not in message


def test_parse_value_never_runs_code(tmp_path):
    marker = tmp_path / "ran"
    for text in (f"__import__('os').system('touch {marker}')",
                 f"open({str(marker)!r}, 'w')",
                 f"[__import__('pathlib').Path({str(marker)!r}).touch()]"):
        with pytest.raises(ValueError, match="not allowed"):
            parse_value(text)
        with pytest.raises(ValueError):
            parse_spec(text)
    assert not marker.exists()


@pytest.mark.parametrize("text, error, fragment", [
    ("Cosine(lr=0.1, T_max=100", ValueError, "'(' was never closed"),
    ("[1, 2", ValueError, "cannot read"),
    ("Cosine(0.1, 100)", TypeError, "Cosine() takes keyword arguments only (lr=, T_max="),
    ("ClipByValue(1, 2, 3)", TypeError, "at most 2 positional argument(s) (max, min)"),
    ("ClipByNorm(1, max_norm=2)", TypeError, "multiple values for argument 'max_norm'"),
    ("Cosine(lr=0.1, lr=0.2)", TypeError, "'lr' is given twice"),
    ("ClipByGlobalNorm(max_norm=-1)", ValueError, "max_norm must be > 0, got -1"),
    ("Cosine(lr=0.1, T_max=10, bogus=1)", TypeError, "bogus"),
    ("(" * 300 + ")" * 300, ValueError, "cannot read"),
])
def test_parse_value_errors_name_the_argument(text, error, fragment):
    with pytest.raises(error) as info:
        parse_value(text)
    assert fragment in str(info.value)


def test_parse_value_takes_a_str_of_bounded_length():
    with pytest.raises(TypeError, match="must be a str"):
        parse_value(1.0)
    with pytest.raises(ValueError, match=f"more than {MAX_LENGTH}"):
        parse_value("[" + "1, " * MAX_LENGTH + "]")


# -- parse_spec ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("adamw", uo.AdamW()),
    ("AdamW", uo.AdamW()),
    ("adamw(lr=1e-3)", uo.AdamW(lr=1e-3)),
    ("AdamW(lr=1e-3)", uo.AdamW(lr=1e-3)),
    ("ADAMW(1e-3)", uo.AdamW(lr=1e-3)),
    ("SGD(lr=0.1, momentum=0.9, nesterov=True)", uo.SGD(lr=0.1, momentum=0.9, nesterov=True)),
    ("adamw(lr=1e-3, amsgrad=True, grad_clip=ClipByGlobalNorm(max_norm=1.0))",
     uo.AdamW(lr=1e-3, amsgrad=True, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0))),
    ("adamw(lr=LinearWarmup(after=Cosine(lr=0.1, T_max=90), warmup_steps=10))",
     uo.AdamW(lr=LinearWarmup(after=Cosine(lr=0.1, T_max=90), warmup_steps=10))),
    ("AdamOffload(lr=0.1)", uo.AdamOffload(lr=0.1)),
    ("adam_offload(lr=0.1)", uo.AdamOffload(lr=0.1)),
    ("uo.AdamW(lr=0.1)", uo.AdamW(lr=0.1)),
    ("unified_opt.get('AdamW', lr=0.1)", uo.AdamW(lr=0.1)),
    ("uo.preset('torch.optim.Adam', lr=0.1)", uo.preset("torch.optim.Adam", lr=0.1)),
    ("torch.optim.Adam(lr=1e-3)", uo.preset("torch.optim.Adam", lr=1e-3)),
    ("torch.optim.Adam(1e-3, (0.8, 0.9))",
     uo.preset("torch.optim.Adam", lr=1e-3, betas=(0.8, 0.9))),
    ("mindspore.nn.Adam(learning_rate=1e-3)", uo.preset("mindspore.nn.Adam", learning_rate=1e-3)),
    ("mindspore.nn.AdamWeightDecay", uo.preset("mindspore.nn.AdamWeightDecay")),
    ("adam(lr=torch.optim.lr_scheduler.StepLR(base_lr=0.1, step_size=2))",
     uo.Adam(lr=uo.schedules.preset("torch.optim.lr_scheduler.StepLR", base_lr=0.1,
                                    step_size=2))),
])
def test_parse_spec_reads_algorithms_and_native_classes(text, expected):
    spec = parse_spec(text)
    assert spec == expected
    assert type(spec) is type(expected)


def test_parse_spec_native_names_keep_the_native_conventions():
    spec = parse_spec("mindspore.nn.AdamWeightDecay(learning_rate=1e-3, weight_decay=0.01)")
    assert isinstance(spec, uo.AdamW)
    assert spec.eps == 1e-6 and spec.bias_correction is False      # not uo.AdamW's defaults
    assert parse_spec("mindspore.nn.Adam(learning_rate=1e-3)").eps_placement == "eps_hat"


def test_parse_spec_reaches_every_algorithm_in_any_case():
    for name in uo.algorithms():
        cls = uo.spec.spec_class(name)
        assert parse_spec(name) == cls()
        assert parse_spec(name.upper() + "()") == cls()
        assert type(parse_spec(cls.__name__)) is cls


def test_parse_spec_adds_keywords_and_reads_json():
    assert parse_spec("adamw", lr=0.1, amsgrad=True) == uo.AdamW(lr=0.1, amsgrad=True)
    assert (parse_spec("mindspore.nn.Adam", learning_rate=0.1)
            == uo.preset("mindspore.nn.Adam", learning_rate=0.1))
    with pytest.raises(TypeError, match="'lr' is given twice"):
        parse_spec("adamw(lr=0.2)", lr=0.1)
    spec = uo.Lamb(lr=Cosine(lr=0.1, T_max=10), grad_clip=uo.ClipByValue(max=1.0))
    assert parse_spec(spec.to_json()) == spec
    with pytest.raises(TypeError, match="JSON"):
        parse_spec(spec.to_json(), lr=0.1)


@pytest.mark.parametrize("text, error, fragment", [
    ("adamx", ValueError, "unknown algorithm 'adamx'; did you mean 'adamax'"),
    ("AdamWW(lr=1)", ValueError, "did you mean 'adamw'"),
    ("torch.optim.Adamm(lr=1)", ValueError, "did you mean 'torch.optim.Adam'"),
    ("os.system('ls')", ValueError, "no preset for the native class 'os.system'"),
    ("Cosine(lr=0.1, T_max=3)", ValueError, "Cosine makes a schedule, not an optimizer spec"),
    ("ClipByGlobalNorm(max_norm=1.0)", ValueError, "makes a clip, not an optimizer spec"),
    ("1.0", ValueError, "expected an optimizer spec"),
    ("[adamw()]", ValueError, "expected an optimizer spec"),
    ("adamw(lr=foo)", ValueError, "the name 'foo' is not allowed"),
    ("adamw(eps=-1)", ValueError, "eps must be > 0, got -1"),
    ("adamw(bogus=1)", TypeError, "bogus"),
    ("torch.optim.Adam(learning_rate=1)", TypeError, "learning_rate"),
    ("adamw(1, 2)", TypeError, "at most 1 positional argument(s) (lr)"),
])
def test_parse_spec_errors(text, error, fragment):
    with pytest.raises(error) as info:
        parse_spec(text)
    assert fragment in str(info.value)


def test_parse_spec_refused_native_class_says_why():
    refused = uo.presets(refused=True)[0]
    with pytest.raises(NotImplementedError, match=re.escape(refused)):
        parse_spec(refused + "()")


def test_names_lists_every_callable_name():
    listed = names()
    assert set(listed["algorithm"]) == {uo.spec.spec_class(n).__name__ for n in uo.algorithms()}
    assert {"Cosine", "LinearWarmup", "Step"} <= set(listed["schedule"])
    assert len(listed["schedule"]) == len(uo.schedules.schedules())
    assert listed["clip"] == ["ClipByGlobalNorm", "ClipByNorm", "ClipByValue"]
    assert listed["preset"] == sorted(uo.presets() + uo.presets(refused=True))
    assert listed["schedule preset"] == sorted(uo.schedules.presets()
                                               + uo.schedules.presets(refused=True))


# -- uo.get: any case, "did you mean" ---------------------------------------------------------

@pytest.mark.parametrize("name, cls", [
    ("AdamW", uo.AdamW), ("adamw", uo.AdamW), ("ADAMW", uo.AdamW), ("SGD", uo.SGD),
    ("Lamb", uo.Lamb), ("RMSprop", uo.RMSprop), ("RMSPROP", uo.RMSprop),
    ("Adam_Offload", uo.AdamOffload), ("AdamOffload", uo.AdamOffload),
    ("DGCMomentum", uo.DGCMomentum),
])
def test_get_accepts_any_case(name, cls):
    spec = uo.get(name, lr=0.5)
    assert type(spec) is cls
    assert spec == cls(lr=0.5)
    assert uo.spec.spec_class(name) is cls


def test_get_unknown_name_suggests_the_closest():
    with pytest.raises(ValueError) as info:
        uo.get("adamx")
    message = str(info.value)
    assert "unknown algorithm 'adamx'; did you mean 'adamax'" in message
    assert "registered" not in message and "'rprop'" not in message    # not the full list
    with pytest.raises(ValueError) as info:
        uo.get("Lamp")
    assert "did you mean 'lamb'" in str(info.value)
    with pytest.raises(ValueError) as info:
        uo.get("zzzzzz")
    assert "did you mean" not in str(info.value)
    assert "uo.algorithms()" in str(info.value)


@pytest.mark.parametrize("name", [3, None, uo.AdamW])
def test_get_non_str_name_is_a_type_error(name):
    with pytest.raises(TypeError, match="algorithm name must be a str"):
        uo.get(name)


# -- unified-opt explain ------------------------------------------------------------------------

def _explain(capsys, *argv):
    code = cli.main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_reads_python_values_schedules_and_clips(capsys):
    code, out, err = _explain(capsys, "adamw", "--backend", "torch", "amsgrad=True",
                              "lr=Cosine(lr=0.1, T_max=100)",
                              "grad_clip=ClipByGlobalNorm(max_norm=1.0)", "betas=(0.8,0.99)")
    assert code == 0, err
    data = json.loads(out.splitlines()[0])
    assert uo.spec_from_dict(data) == uo.AdamW(
        amsgrad=True, lr=Cosine(lr=0.1, T_max=100), betas=(0.8, 0.99),
        grad_clip=uo.ClipByGlobalNorm(max_norm=1.0))
    assert data["hyperparameters"]["lr"]["schedule"] == "cosine"
    assert data["hyperparameters"]["grad_clip"]["max_norm"] == 1.0
    assert "torch: adamw -> " in out


def test_explain_reads_one_spec_expression(capsys):
    code, out, err = _explain(capsys, "adamw(lr=1e-3, amsgrad=True)", "--backend", "paddle")
    assert code == 0, err
    assert uo.spec_from_dict(json.loads(out.splitlines()[0])) == uo.AdamW(lr=1e-3, amsgrad=True)
    assert "paddle: adamw -> " in out
    # extra key=value pairs are added to the expression's
    code, out, err = _explain(capsys, "AdamW(lr=1e-3)", "--backend", "torch", "weight_decay=0.1",
                              "eps_placement=eps_hat")
    assert code == 0, err
    assert (uo.spec_from_dict(json.loads(out.splitlines()[0]))
            == uo.AdamW(lr=1e-3, weight_decay=0.1, eps_placement="eps_hat"))
    assert "torch: adamw -> own implementation" in out
    assert "needs eps_placement='outside'" in out


def test_explain_reads_native_expressions(capsys):
    code, out, err = _explain(capsys, "torch.optim.Adam(lr=1e-3, amsgrad=True)",
                              "--backend", "mindspore")
    assert code == 0, err
    assert (uo.spec_from_dict(json.loads(out.splitlines()[0]))
            == uo.preset("torch.optim.Adam", lr=1e-3, amsgrad=True))
    assert "mindspore: adam -> " in out
    code, out, err = _explain(capsys, "mindspore.nn.AdamWeightDecay", "--backend", "torch",
                              "learning_rate=1e-3", "weight_decay=0.1")
    assert code == 0, err
    assert "needs bias_correction=True" in out


@pytest.mark.parametrize("argv, fragment", [
    (["adamw", "--backend", "torch", "lr=Cosin(lr=0.1)"],
     "lr='Cosin(lr=0.1)': parse_value: calling the name 'Cosin' is not allowed"),
    (["adamw", "--backend", "torch", "grad_clip=ClipByGlobalNorm"], "call it"),
    (["adamw", "--backend", "torch", "lr=1+2"], "lr='1+2'"),
    (["adamw", "--backend", "torch", "amsgrad=maybe"], "amsgrad must be a bool, got 'maybe'"),
    (["adamw", "--backend", "torch", "amsgrad"], "expected key=value, got 'amsgrad'"),
    (["adamw", "--backend", "torch", "1lr=0.1"], "'1lr' in '1lr=0.1' is not a hyperparameter"),
    (["adamw", "--backend", "torch", "lr=0.1", "lr=0.2"], "lr is given twice"),
    (["adamw(lr=1e-3)", "--backend", "torch", "lr=0.1"], "'lr' is given twice"),
    (["adamw(lr=1e-3", "--backend", "torch"], "cannot read 'adamw(lr=1e-3'"),
    (["adamx", "--backend", "torch"], "unknown algorithm 'adamx'; did you mean 'adamax'"),
    (["torch.optim.Adamm", "--backend", "torch"], "did you mean 'torch.optim.Adam'"),
    (["Cosine(lr=0.1, T_max=10)", "--backend", "torch"], "not an optimizer spec"),
    (["__import__('os').system('true')", "--backend", "torch"], "not allowed"),
    (["adamw", "--backend", "jax"], "got 'jax'"),
    (["adam", "--backend", "torch", "eps=-1"], "eps must be > 0, got -1.0"),
])
def test_explain_usage_errors_are_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = _explain(capsys, *argv)
    assert code == 2
    assert out == ""
    assert fragment in err
    assert err.startswith("unified-opt explain: error: ")
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_explain_help_describes_every_argument(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["explain", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())        # whatever the line breaks
    for text in ("which path uo.build takes", "SPEC", "spec expression", "--backend NAME",
                 "torch, paddle, mindspore", "key=value", "Python literal",
                 "unified-opt explain \"adamw(lr=1e-3, amsgrad=True)\" --backend paddle",
                 'lr="Cosine(lr=0.1, T_max=100)"'):
        assert text in out


def test_every_command_and_option_has_a_description():
    parser = cli._parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(commands.choices) >= {"conformance", "explain", "matrix", "check", "report",
                                     "diff"}

    def described(commands, prefix=""):
        helps = {choice.dest: choice.help for choice in commands._choices_actions}
        for name, sub in commands.choices.items():
            assert helps[name], prefix + name
            assert sub.description, prefix + name
            for action in sub._actions:
                assert action.help, (prefix + name, action.dest)
                if isinstance(action, argparse._SubParsersAction):
                    described(action, f"{prefix}{name} ")
    described(commands)
    report = commands.choices["report"]
    (actions,) = [a for a in report._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(actions.choices) == {"diff"}


def test_top_level_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for text in ("conformance", "run the conformance suite", "explain", "which lowering",
                 "matrix", "compatibility matrix", "Exit status"):
        assert text in out


# -- unified-opt matrix ---------------------------------------------------------------------------

def test_matrix_without_out_prints_to_stdout(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)                # outside a checkout: no docs/ here
    assert cli.main(["matrix"]) == 0
    out = capsys.readouterr().out
    assert out == markdown()
    assert list(tmp_path.iterdir()) == []


def test_matrix_out_writes_the_file(tmp_path, capsys):
    target = tmp_path / "compatibility.md"
    assert cli.main(["matrix", "--out", str(target)]) == 0
    assert target.read_text() == markdown()
    assert f"wrote {target}" in capsys.readouterr().out


@pytest.mark.parametrize("where, fragment", [
    ("missing/compatibility.md", "does not exist"),
    (".", "is a directory"),
])
def test_matrix_out_bad_path_is_a_usage_error(tmp_path, monkeypatch, capsys, where, fragment):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["matrix", "--out", where]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("unified-opt matrix: error: --out ")
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_matrix_command_outside_a_checkout(tmp_path):
    run = subprocess.run([sys.executable, "-m", "unified_opt.cli", "matrix"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("# Compatibility matrix")
    assert "Traceback" not in run.stderr
    run = subprocess.run([sys.executable, "-m", "unified_opt.cli", "matrix", "--out",
                          "docs/compatibility.md"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert "unified-opt matrix: error: --out docs/compatibility.md: directory 'docs'" in run.stderr


def _documented_commands():
    commands = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for snippet in re.findall(r"`(unified-opt (?:explain|matrix)\b[^`]*)`", path.read_text()):
            commands.append((path.name, snippet))
    return commands


def test_documented_explain_and_matrix_commands_work(tmp_path, monkeypatch, capsys):
    commands = _documented_commands()
    assert ("README.md", "unified-opt matrix --out docs/compatibility.md") in commands
    assert any(c.startswith("unified-opt explain \"adamw(") for _, c in commands)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    for doc, command in commands:
        argv = shlex.split(command)[1:]
        assert cli.main(argv) == 0, (doc, command, capsys.readouterr().err)
    # the documented regeneration command writes the generated matrix (that the committed
    # file is current is tests/test_docs.py's check)
    assert (tmp_path / "docs" / "compatibility.md").read_text() == markdown()


@pytest.mark.parametrize("text, words", [
    ("adam(lr=float('nan'))", "write nan as a bare word"),
    ("adam(eps=float('-inf'))", "write -inf as a bare word"),
    ("adam(betas=tuple([0.9, 0.99]))", "the Python builtin 'tuple'"),
])
def test_a_python_builtin_is_not_taken_for_a_misspelt_spec(text, words):
    """float('nan') once suggested "did you mean 'AdamOffload'?" (issue 22)."""
    with pytest.raises(ValueError) as info:
        parse_spec(text)
    assert words in str(info.value) and "did you mean" not in str(info.value)


def _one_line_usage_error(capsys, command: str, fragment: str) -> None:
    out, err = capsys.readouterr()
    assert err.startswith(f"unified-opt {command}: error: --out "), err
    assert fragment in err and len(err.strip().splitlines()) == 1, err


def test_an_out_that_cannot_be_written_is_a_one_line_usage_error(tmp_path, monkeypatch,
                                                                  capsys):
    """Exit 1 means "does not conform / differs"; a bad --out is a bad command line (2),
    said in one line before anything runs (no traceback)."""
    taken = tmp_path / "taken.txt"
    taken.write_text("a file, not a directory")
    script = tmp_path / "train.py"
    script.write_text("import torch\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n")
    assert cli.main(["port", str(script), "--to", "paddle",
                     "-o", str(tmp_path / "missing" / "out.py")]) == 2
    _one_line_usage_error(capsys, "port", "No such file or directory")
    (tmp_path / "factory.py").write_text(
        "import torch\n\ndef make(params):\n    return torch.optim.AdamW(params, lr=1e-3)\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", "factory:make", "--preset", "torch.optim.AdamW(lr=1e-3)",
                     "--out", str(taken)]) == 2
    _one_line_usage_error(capsys, "check", "is a file, not a directory")
    assert cli.main(["conformance", "--backends", "torch", "--cases", "adam_default",
                     "--out", str(taken / "sub")]) == 2
    _one_line_usage_error(capsys, "conformance", "is a file, not a directory")
    assert taken.read_text() == "a file, not a directory"
