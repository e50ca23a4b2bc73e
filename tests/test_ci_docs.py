"""docs/ci.md: its YAML and ini examples parse, have the structure the CI systems need,
and every ``unified-opt`` / ``pytest --uo-*`` command line in them is one that the CLI and
the pytest plugin accept."""

import argparse
import configparser
import re
import shlex
from pathlib import Path

import pytest
import yaml  # PyYAML: the "test" extra

from unified_opt.cli import _parser
from unified_opt.conformance import pytest_plugin

DOC = Path(__file__).resolve().parents[1] / "docs" / "ci.md"
BACKENDS = ["torch", "paddle", "mindspore"]
SHELL_OPERATORS = {"||", "&&", "|", ";", ">", ">>", "2>", "then", "fi"}


def blocks(language: str) -> list[str]:
    """The fenced ```language blocks of docs/ci.md, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(), re.S | re.M)


def logical_lines(text: str) -> list[str]:
    """Lines with shell continuations (a trailing backslash) joined."""
    return text.replace("\\\n", " ").splitlines()


def command_lines(program: str) -> list[list[str]]:
    """Every ``program ...`` command in the yaml and ini blocks, as argument lists (the
    program's own arguments), cut at a shell operator; ``${{ ... }}`` and ``{posargs}``
    stand for values."""
    found = []
    for text in blocks("yaml") + blocks("ini"):
        for line in logical_lines(text):
            match = re.search(rf"(?:^|[\s/]){re.escape(program)}\s+(.*)", line)
            if match is None or re.match(r"\s*(#|(- )?name:)", line):   # prose, not a command
                continue
            rest = re.sub(r"\$\{\{.*?\}\}", "VALUE", match.group(1)).replace("{posargs}", "")
            words = shlex.split(rest)
            cut = next((i for i, w in enumerate(words) if w in SHELL_OPERATORS), len(words))
            found.append(words[:cut])
    return found


def subcommands(parser: argparse.ArgumentParser) -> dict:
    """``parser``'s subcommand name -> subparser ({} when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def assert_cli_accepts(words: list[str]) -> None:
    """The subcommand path of ``words`` exists, every ``--option`` is one of its leaf
    parser's, and the leaf parser parses the whole line."""
    parser, path, rest = _parser(), [], list(words)
    while subcommands(parser):
        positionals = [w for w in rest if not w.startswith("-")]
        assert positionals, f"unified-opt {' '.join(words)}: no subcommand after {path}"
        name = positionals[0]
        assert name in subcommands(parser), (
            f"unified-opt {' '.join(words)}: {name!r} is not a subcommand of "
            f"{['unified-opt'] + path}; it has {sorted(subcommands(parser))}")
        parser, rest = subcommands(parser)[name], rest[rest.index(name) + 1:]
        path.append(name)
    for word in rest:
        option = word.split("=")[0]
        if option.startswith("--"):
            assert option in parser._option_string_actions, (
                f"unified-opt {' '.join(words)}: {path} has no option {option}; it has "
                f"{sorted(o for o in parser._option_string_actions if o.startswith('--'))}")
    try:
        parser.parse_args(rest)
    except SystemExit:
        pytest.fail(f"unified-opt {' '.join(words)}: {path} does not parse {rest}")


def test_every_yaml_block_parses():
    found = blocks("yaml")
    assert len(found) >= 3
    for text in found:
        assert isinstance(yaml.safe_load(text), dict), text[:200]


def github_workflows() -> list[dict]:
    return [doc for doc in map(yaml.safe_load, blocks("yaml")) if "jobs" in doc]


def test_github_workflow_has_a_backend_matrix_cache_artifact_and_gate():
    workflows = github_workflows()
    assert len(workflows) == 2, "the suite's workflow and the user's project's"
    for workflow in workflows:
        assert "on" in workflow or True in workflow    # YAML 1.1 reads the key `on` as True
        for job in workflow["jobs"].values():
            assert job["runs-on"] and isinstance(job["steps"], list)
            uses = [step.get("uses", "") for step in job["steps"]]
            cache = next(s for s in job["steps"] if s.get("uses", "").startswith(
                "actions/cache@"))
            assert ".venv" in cache["with"]["path"]
            assert "hashFiles('pyproject.toml')" in cache["with"]["key"]
            assert any(u.startswith("actions/upload-artifact@") for u in uses)
    suite = workflows[0]["jobs"]["conformance"]
    assert suite["strategy"]["matrix"]["backend"] == BACKENDS
    runs = "\n".join(step.get("run", "") for step in suite["steps"])
    assert ".[${{ matrix.backend }}]" in runs
    assert ("unified-opt conformance --backends ${{ matrix.backend }} --out "
            "conformance-report") in runs
    assert ("unified-opt report diff main-report/report.json "
            "conformance-report/report.json") in runs
    python = next(s for s in suite["steps"] if s.get("uses", "").startswith(
        "actions/setup-python@"))
    assert python["with"]["python-version"] == "3.11"
    check_runs = "\n".join(step.get("run", "") for job in workflows[1]["jobs"].values()
                           for step in job["steps"])
    assert ('unified-opt check mypkg.optim:make_lamb --spec "lamb(lr=1e-3)" --backend '
            "torch --out check-report") in check_runs
    assert "pytest --uo-report uo-report" in check_runs


def test_gitlab_job_has_cache_and_junit_artifact():
    gitlab = [doc for doc in map(yaml.safe_load, blocks("yaml")) if "jobs" not in doc]
    assert len(gitlab) == 1
    jobs = {name: job for name, job in gitlab[0].items() if isinstance(job, dict)
            and "script" in job}
    suite = jobs["conformance"]
    assert suite["artifacts"]["reports"]["junit"] == "conformance-report/junit.xml"
    assert suite["parallel"]["matrix"] == [{"BACKEND": BACKENDS}]
    assert suite["cache"]["key"]["files"] == ["pyproject.toml"]
    assert ".venv/" in suite["cache"]["paths"]
    script = "\n".join(suite["script"])
    assert "unified-opt conformance --backends" in script
    assert "unified-opt report diff main-report/report.json" in script
    for job in jobs.values():
        assert job["artifacts"]["reports"]["junit"]


def test_tox_block_parses_with_a_conformance_env():
    (text,) = blocks("ini")
    config = configparser.ConfigParser(interpolation=None)
    config.read_string(text)
    assert "unified-opt conformance" in config["testenv:conformance"]["commands"]
    assert "conformance" in config["tox"]["envlist"]


def test_the_documented_commands_exist():
    lines = command_lines("unified-opt")
    assert {tuple(words[:2]) for words in lines} >= {
        ("conformance", "--backends"), ("check", "mypkg.optim:make_lamb"), ("report", "diff")}
    for words in lines:
        assert_cli_accepts(words)


class _OptionRecorder:
    """Stands in for pytest's parser: records the options the plugin adds."""

    def __init__(self):
        self.options = set()

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **kwargs):
        self.options.update(names)


def test_the_documented_pytest_options_exist():
    recorder = _OptionRecorder()
    pytest_plugin.pytest_addoption(recorder)
    used = {w.split("=")[0] for words in command_lines("pytest") for w in words
            if w.startswith("--uo-")}
    assert used == {"--uo-report"}
    assert used <= recorder.options


def test_the_command_checker_catches_unknown_commands_and_options():
    for words in (["conformance", "--backend", "torch"], ["explain"], ["report", "merge"],
                  ["frobnicate"], ["report", "diff", "a.json"]):
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            assert_cli_accepts(words)
