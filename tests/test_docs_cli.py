"""The command line's own documentation: ``unified-opt --version`` and the examples in
``diff --help`` and ``port --help``, each of which runs as shown."""

import re
import shlex

import pytest

import unified_opt as uo
from unified_opt.cli import main


def _help(capsys, *command: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def _examples(text: str) -> list[list[str]]:
    """The commands under ``examples:``, continuation lines joined, comments dropped."""
    block = text.split("examples:\n", 1)[1].replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in block.splitlines()
            if line.strip().startswith("unified-opt ")]


def test_version(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"unified-opt {uo.__version__}\n"


def test_diff_help_shows_examples_that_run(capsys):
    examples = _examples(_help(capsys, "diff"))
    assert len(examples) == 3
    codes = []
    for example in examples:
        assert example[:2] == ["unified-opt", "diff"]
        codes.append(main(example[1:]))
        out = capsys.readouterr().out
        assert re.search(r"^(SAME|DIFFERENT): ", out, re.M), out
    assert codes == [1, 1, 1]          # each pair differs (eps placement, decay form, ...)


def test_port_help_shows_examples(capsys, tmp_path, monkeypatch):
    examples = _examples(_help(capsys, "port"))
    assert [e[:2] for e in examples] == [["unified-opt", "port"]] * 3
    # the third, on a Paddle script, as written (in a folder holding that script)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_paddle.py").write_text(
        "import paddle\nmodel = paddle.nn.Linear(2, 2)\n"
        "opt = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())\n")
    assert main(examples[2][1:]) == 0
    ported = (tmp_path / "train_torch.py").read_text()
    assert "torch.optim.AdamW(model.parameters()" in ported and "lr=0.001" in ported
