"""Where DGC's compressed exchange does not run over a framework's collectives yet
(MindSpore), ``uo.build`` refuses a data-parallel spec on more than one rank (each rank
would silently step as one worker on its own gradients): on 2 ranks started by ``msrun``
(CPU) every rank gets the error and still builds AdamW. Under torchrun (gloo) and
``paddle.distributed.launch`` it builds, with its exchange over the process group (its
numbers: test_dgc_distributed.py); without a process group it is refused."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require
from support import installed_frameworks

import unified_opt as uo

RANK_SCRIPT = Path(__file__).parent / "launched_build.py"
FRAMEWORKS = [f for f in ("torch", "paddle", "mindspore") if f in installed_frameworks()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(framework: str, logs: Path) -> list[str]:
    if framework == "torch":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                f"--master_port={_free_port()}", str(RANK_SCRIPT), "torch"]
    if framework == "paddle":
        return [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node=2",
                f"--log_dir={logs}", str(RANK_SCRIPT), "paddle"]
    return [sys.executable, "-m", "mindspore.parallel.cluster.run", "--worker_num=2",
            "--local_worker_num=2", f"--master_port={_free_port()}", f"--log_dir={logs}",
            "--join=True", str(RANK_SCRIPT), "mindspore"]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Each launcher's output (its ranks' lines), all launched at once."""
    root = tmp_path_factory.mktemp("launched")
    # msrun starts `python` from PATH: this interpreter's
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                                f"{os.environ.get('PATH', '')}")
    env.pop("WORLD_SIZE", None)
    processes = {f: subprocess.Popen(_command(f, root / f), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env, cwd=root)
                 for f in FRAMEWORKS}
    out = {}
    for framework, process in processes.items():
        text, _ = process.communicate(timeout=300)
        logs = root / framework
        if logs.is_dir():       # paddle and msrun write each rank's output to a log file
            text += "".join(p.read_text(errors="replace") for p in sorted(logs.glob("*.log")))
            text += "".join(p.read_text(errors="replace")
                            for p in sorted(logs.glob("workerlog.*")))
        out[framework] = (process.returncode, text)
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_rank_refuses_dgc_and_builds_adamw(launched, framework):
    code, text = launched[framework]
    assert code == 0, text[-3000:]
    for rank in (0, 1):
        if framework in ("torch", "paddle"):
            assert f"rank {rank}/2: dgc built" in text, text[-3000:]
        else:
            assert (f"rank {rank}/2: dgc refused: build: DGCMomentum on 2 ranks: its "
                    f"compressed gradient exchange does not run over {framework}'s "
                    "collectives yet") in text, text[-3000:]
        assert f"rank {rank}/2: adamw built" in text


@require("torch")
def test_a_launcher_environment_without_a_group_is_more_than_one_rank(monkeypatch):
    import torch

    params = [torch.nn.Parameter(torch.zeros(3))]
    uo.build(uo.DGCMomentum(), params)                      # world size 1
    monkeypatch.setenv("WORLD_SIZE", "4")                    # torchrun, before the group
    with pytest.raises(ValueError, match=r"DGCMomentum on 4 ranks \(WORLD_SIZE\) with no "
                                         "process group: call torch.distributed."
                                         "init_process_group before uo.build"):
        uo.build(uo.DGCMomentum(), params)
    with pytest.raises(ValueError, match="options process_group=.* is for data-parallel"):
        uo.build(uo.AdamW(), params, options={"process_group": None})
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not a number of ranks"):
        uo.build(uo.DGCMomentum(), params)


@require("paddle")
def test_a_paddle_launch_environment_without_the_parallel_env(monkeypatch):
    import paddle

    params = [paddle.create_parameter([3], "float32")]
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    with pytest.raises(ValueError, match=r"DGCMomentum on 2 ranks \(PADDLE_TRAINERS_NUM\) "
                                         "before the parallel env"):
        uo.build(uo.DGCMomentum(), params)
