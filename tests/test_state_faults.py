"""State files and the other files a user keeps survive faults (issue 41): a process
killed at any moment of a save, or a save that hits a file size limit, leaves the old
file whole and loadable; files are written in safetensors' own layout, readable by the
safetensors package; trajectories and report diffs are atomic too.

The kill and size-limit tests run in numpy-only child processes (``_write`` of a
snapshot made from arrays), which start in well under a second."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from unified_opt.files import PARTIAL_SUFFIX

#: builds two snapshots of one state layout whose arrays differ everywhere (``old`` and
#: ``new``, seeds 0 and 1), ``elements`` float32 values per array, four arrays
SNAPSHOTS = """
import numpy as np
import unified_opt as uo
from unified_opt.porting.state import Snapshot, bfloat16_bits

def snapshot(seed, elements):
    rng = np.random.default_rng(seed)
    names = ["w", "b"]
    arrays = {n: {"exp_avg": rng.standard_normal(elements).astype(np.float32),
                  "exp_avg_sq": rng.random(elements).astype(np.float32)} for n in names}
    return Snapshot(spec=uo.AdamW(lr=1e-3, weight_decay=0.01), groups=(), names=names,
                    shapes={n: (elements,) for n in names}, steps=3 + seed, position=None,
                    param_steps={n: 3 + seed for n in names}, arrays=arrays,
                    framework="torch")
"""

#: a numpy-only server: saves state 0 to argv[1]; then for each line on stdin (a seed,
#: 0 or 1) forks a child that saves that state over the file, prints the child's pid,
#: waits for it (killed or not) and prints "done"
KILL_SERVER = SNAPSHOTS + """
import os, sys, time
from pathlib import Path
from unified_opt.porting.state import _write

path, elements = Path(sys.argv[1]), int(sys.argv[2])
states = [snapshot(0, elements), snapshot(1, elements)]
started = time.perf_counter()
_write(states[0], path)
print(f"ready {time.perf_counter() - started:.4f}", flush=True)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        try:
            _write(states[int(line)], path)
        finally:
            os._exit(0)
    print(pid, flush=True)
    os.waitpid(pid, 0)
    print("done", flush=True)
"""

#: saves the old state, then the new one under RLIMIT_FSIZE (SIGXFSZ ignored, so the
#: write raises OSError): prints the error as JSON
SIZE_LIMIT = SNAPSHOTS + """
import json, resource, signal, sys
from pathlib import Path
from unified_opt.porting.state import _write

path, elements = Path(sys.argv[1]), int(sys.argv[2])
_write(snapshot(0, elements), path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size // 2,) * 2)
try:
    _write(snapshot(1, elements), path)
except OSError as error:
    print(json.dumps({"type": type(error).__name__, "errno": error.errno,
                      "message": str(error)}))
else:
    print(json.dumps(None))
"""


def _snapshot(seed: int, elements: int):
    namespace: dict = {}
    exec(SNAPSHOTS, namespace)
    return namespace["snapshot"](seed, elements)


def _same_arrays(saved, expected) -> bool:
    return all(np.array_equal(saved.arrays[n][k], a)
               for n, state in expected.arrays.items() for k, a in state.items())


def _leftovers(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(PARTIAL_SUFFIX))


def _wait_for_partial(folder: Path, size: float, timeout: float = 10.0) -> None:
    """Until a temporary file in ``folder`` holds ``size`` bytes (or ``timeout`` s)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for partial in _leftovers(folder):
            try:
                if partial.stat().st_size >= size:
                    return
            except FileNotFoundError:     # replaced meanwhile
                return
        time.sleep(0.0005)


def test_a_save_killed_at_random_moments_leaves_the_old_or_the_new_state(tmp_path):
    from unified_opt.porting.state import read_state

    elements = 2_000_000        # 4 float32 arrays: a 32 MB file
    path = tmp_path / "run.safetensors"
    server = subprocess.Popen([sys.executable, "-c", KILL_SERVER, str(path), str(elements)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        ready = server.stdout.readline().split()
        assert ready and ready[0] == "ready", ready
        duration = float(ready[1])            # one whole save, fsync included
        states = [_snapshot(0, elements), _snapshot(1, elements)]
        held = 0                              # the state the file holds
        rng = random.Random(41)
        outcomes, cut_short = [], 0
        for round_ in range(20):
            server.stdin.write(f"{1 - held}\n")     # save the other state over it
            server.stdin.flush()
            pid = int(server.stdout.readline())
            if round_ % 2:        # at a random moment of (about) a whole save
                time.sleep(rng.uniform(0.0, 1.2 * duration))
            else:                 # once the temporary file holds a random part of it
                _wait_for_partial(tmp_path, rng.uniform(0.05, 0.6) * path.stat().st_size)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:        # it finished first: the new state
                pass
            assert server.stdout.readline().strip() == "done"
            saved = read_state(path)          # a truncated file would raise here
            if _same_arrays(saved, states[held]):
                outcomes.append("old")
            else:
                assert _same_arrays(saved, states[1 - held]), "neither old nor new state"
                outcomes.append("new")
                held = 1 - held
            assert saved.steps == 3 + held
            # a killed save leaves its temporary file beside the target, never in its
            # place; one shorter than the file shows the kill landed inside the write
            for partial in _leftovers(tmp_path):
                cut_short += partial.stat().st_size < path.stat().st_size
                partial.unlink()
        # the kills landed inside the write: new files cut short, the old ones intact
        assert cut_short >= 8 and outcomes.count("old") >= 8, (cut_short, outcomes)
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert server.returncode == 0
    # leftovers of killed saves break nothing: another save and load go through
    from unified_opt.porting.state import _write

    (tmp_path / f".run.safetensors.left{PARTIAL_SUFFIX}").write_bytes(b"\0" * 100)
    _write(_snapshot(1, 1000), path)
    assert _same_arrays(read_state(path), _snapshot(1, 1000))


def test_a_save_over_the_size_limit_fails_clearly_and_keeps_the_old_file(tmp_path):
    from unified_opt.porting.state import read_state

    path = tmp_path / "run.safetensors"
    done = subprocess.run([sys.executable, "-c", SIZE_LIMIT, str(path), "100000"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    error = json.loads(done.stdout.strip().splitlines()[-1])
    assert error is not None, "the save over the limit did not fail"
    assert error["type"] == "OSError" and error["errno"] == 27      # EFBIG
    assert error["message"] == (
        "[Errno 27] save_state: cannot write the state file (File too large); the file "
        f"there, if any, is unchanged: '{path}'")
    assert _same_arrays(read_state(path), _snapshot(0, 100_000))
    assert _leftovers(tmp_path) == []


def test_a_state_file_is_safetensors_and_streams_bfloat16(tmp_path):
    """Readable by the safetensors package (its own reader checks the layout), arrays
    aligned to their item size; bfloat16 kept bit for bit as BF16."""
    from safetensors import deserialize, safe_open

    from unified_opt.porting.state import BFLOAT16, _write, bfloat16_bits, read_state

    snapshot = _snapshot(0, 5)
    values = np.float32([1.5, -2.0, 0.0, 3.0, 0.25])
    snapshot.arrays["b"] = {k: bfloat16_bits(values * (i + 1))
                            for i, k in enumerate(("exp_avg", "exp_avg_sq"))}
    path = tmp_path / "run.safetensors"
    _write(snapshot, path)
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata()["format"] == "unified-opt-state/1"
        np.testing.assert_array_equal(f.get_tensor("state/w/exp_avg"),
                                      snapshot.arrays["w"]["exp_avg"])
        assert f.get_tensor("step/w").tolist() == [3]
    header_size = int.from_bytes(path.read_bytes()[:8], "little")
    assert header_size % 8 == 0
    entries = dict(deserialize(path.read_bytes()))
    assert entries["state/b/exp_avg"]["dtype"] == "BF16"
    assert bytes(entries["state/b/exp_avg_sq"]["data"]) == (
        snapshot.arrays["b"]["exp_avg_sq"].tobytes())
    header = json.loads(path.read_bytes()[8:8 + header_size])
    for key, entry in header.items():
        if key != "__metadata__":
            width = {"F32": 4, "BF16": 2, "I64": 8}[entry["dtype"]]
            assert entry["data_offsets"][0] % width == 0, key
    saved = read_state(path)
    assert saved.arrays["b"]["exp_avg"].dtype == BFLOAT16
    assert _same_arrays(saved, snapshot)


def test_a_file_extended_past_its_tensors_is_refused(tmp_path):
    from unified_opt.porting.state import _write, read_state

    path = tmp_path / "run.safetensors"
    _write(_snapshot(0, 10), path)
    with open(path, "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(ValueError, match="the tensors span .* bytes and the file holds"):
        read_state(path)


# -- trajectories and report diffs ---------------------------------------------------------

def _failing_fsync(monkeypatch):
    """os.fsync raising ENOSPC: the content is written, then the write fails."""
    import errno

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("compress", [True, False])
def test_a_trajectory_save_that_fails_keeps_the_old_file(tmp_path, monkeypatch, compress):
    from unified_opt.conformance.trajectory import Trajectory

    def trajectory(value):
        return Trajectory(lrs=np.full(3, value), params={"w": np.full((3, 2), value)})

    trajectory(1.0).save(tmp_path / "t", compress=compress)    # .npz appended
    path = tmp_path / "t.npz"
    assert Trajectory.load(path).params["w"].tolist() == [[1.0, 1.0]] * 3
    with monkeypatch.context() as patch:
        _failing_fsync(patch)
        with pytest.raises(OSError, match="No space left"):
            trajectory(2.0).save(path, compress=compress)
    assert Trajectory.load(path).params["w"].tolist() == [[1.0, 1.0]] * 3
    assert _leftovers(tmp_path) == []
    trajectory(2.0).save(path, compress=compress)
    assert Trajectory.load(path).lrs.tolist() == [2.0] * 3


def test_a_report_diff_json_that_fails_keeps_the_old_file(tmp_path, monkeypatch, capsys):
    from unified_opt.conformance.report import FORMAT_VERSION
    from unified_opt.conformance.report_diff import main_diff

    report = {"format_version": FORMAT_VERSION, "suite_version": 3, "cases": [],
              "results": [], "summary": {"total": 0}}
    (tmp_path / "a.json").write_text(json.dumps(report))
    out = tmp_path / "diff.json"
    out.write_text("the old diff\n")
    with monkeypatch.context() as patch:
        _failing_fsync(patch)
        with pytest.raises(ValueError, match="--json .*: cannot write it: No space left"):
            main_diff(tmp_path / "a.json", tmp_path / "a.json", json_out=out)
    assert out.read_text() == "the old diff\n"
    assert _leftovers(tmp_path) == []
    assert main_diff(tmp_path / "a.json", tmp_path / "a.json", json_out=out) == 0
    assert json.loads(out.read_text())["exit_status"] == 0
    capsys.readouterr()


def test_a_pipe_is_written_through_and_a_link_keeps_being_one(tmp_path):
    """Atomic writes replace regular files only: a FIFO (as /dev/null or /dev/stdout, a
    device or a pipe) is written through, not renamed over (as root, `-o /dev/null`
    put a regular file where the device was); a symbolic link stays a link to the
    new file."""
    import stat
    import threading

    from unified_opt.files import write_bytes, write_text

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_bytes(fifo, b"through the pipe")
    reader.join(timeout=30)
    assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]      # no partial file left
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
