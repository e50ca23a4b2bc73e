"""The examples run (examples/README.md): the training loop in every installed
framework, and DGC under each framework's launcher at 2 ranks for a few steps. The
others run elsewhere, once: the porting examples in tests/test_porting_walkthrough.py and
tests/test_port.py, the example project (examples/check_project: `unified-opt check`
and the pytest plugin) in tests/test_release.py, from the wheel."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import installed_frameworks

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: a few steps past DGC's dense warm-up (rampup_begin_step=10): compressed steps too
DGC_STEPS = 12


def _run(command, cwd=ROOT, timeout=300, env=None):
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def test_the_training_loop_agrees_across_frameworks():
    frameworks = installed_frameworks()
    if not frameworks:
        pytest.skip("no framework installed")
    out = _run([sys.executable, str(EXAMPLES / "training_loop.py"), "--steps", "5"])
    for framework in frameworks:
        assert re.search(rf"^ *{framework}: .*: loss [0-9.]+ -> [0-9.]+$", out, re.M), out
    spread = float(re.search(r"losses: ([0-9.e+-]+)$", out, re.M).group(1))
    # five float32 steps of one MLP, each framework's own kernels: measured 4.4e-7
    assert spread < 1e-5, out


#: seen in two whole-suite runs here (one of them with two test processes at once): a torch
#: rank aborts after the example's last step was printed, between its last exchange and
#: its exit (``dist.barrier``, ``destroy_process_group``, the interpreter's end), with
#: this line from the C++ runtime and no Python error; 64 runs outside pytest (4 to 6 at
#: once) did not show it. A run that fails so is launched again (PYTHONFAULTHANDLER=1 puts
#: the ranks' Python stacks in the output if it comes back)
TEARDOWN_ABORT = "terminate called without an active exception"
#: launches at most: a clean-clone CI run at load about 3 saw the abort in two launches
#: in a row (the next run of the test passed three times out of three)
TEARDOWN_TRIES = 3


def _launched(backend: str, script: str, directory: Path):
    from unified_opt.conformance.distributed import launch_environment, launcher

    directory.mkdir()
    command = launcher(backend, 2, directory / "logs") + [
        str(EXAMPLES / "distributed" / script), str(DGC_STEPS)]
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=300,
                          env=dict(launch_environment(), PYTHONFAULTHANDLER="1"),
                          start_new_session=True)
    log_dir = directory / "logs"
    logs = "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("*"))
                   if p.is_file()) if log_dir.exists() else ""
    return done, done.stdout + done.stderr + logs


@pytest.mark.parametrize("backend, script", [("torch", "dgc_torchrun.py"),
                                             ("paddle", "dgc_paddle_launch.py"),
                                             ("mindspore", "dgc_msrun.py")])
def test_dgc_under_the_launcher(backend, script, tmp_path):
    if backend not in installed_frameworks():
        pytest.skip(f"{backend} is not installed")
    final = rf"^step {DGC_STEPS}: loss [0-9.]+, sent ([0-9.]+) of the dense bytes"
    done, text = _launched(backend, script, tmp_path / "launch_0")
    for again in range(1, TEARDOWN_TRIES):
        if not (backend == "torch" and done.returncode != 0 and re.search(final, text, re.M)
                and TEARDOWN_ABORT in text):
            break
        # torch's own teardown, after every step ran (see TEARDOWN_ABORT): again
        done, text = _launched(backend, script, tmp_path / f"launch_{again}")
    assert done.returncode == 0, text[-6000:]
    line = re.search(final, text, re.M)
    assert line, text[-6000:]
    assert 0 < float(line.group(1)) < 1          # compressed steps sent less than dense


def test_every_example_is_run_by_a_test():
    tests = {p.name: p.read_text() for p in (ROOT / "tests").glob("test_*.py")}
    for example in sorted(p for p in EXAMPLES.rglob("*.py") if "check_project" not in p.parts):
        relative = example.relative_to(EXAMPLES).as_posix()
        assert any(example.name in text for text in tests.values()), relative
    assert '"examples" / "check_project"' in tests["test_release.py"]
