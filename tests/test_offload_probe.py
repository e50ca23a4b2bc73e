"""benchmarks/offload_probe.py: without CUDA it says so and exits 0; ``--device cpu
--tiny`` runs the rows that need no GPU (a dry run), each with a time and no error."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import require

pytestmark = require("torch")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "offload_probe.py"


def _run(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = _run("--out", str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "offload_probe: CUDA is not available here; nothing measured"
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_times_every_row_that_needs_no_gpu(tmp_path):
    done = _run("--device", "cpu", "--tiny", "--steps", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "offload_probe.json").read_text())
    assert [r["key"] for r in report["rows"]] == [
        "host/to-cpu", "host/pageable", "host/triad", "host/in-batches", "host/layout",
        "offload/ring",
        "offload/per-parameter", "offload/ring-8-slots", "offload/ring-2M", "offload/ring-1M"]
    for row in report["rows"]:
        assert "error" not in row and row["ms"] > 0, row
    offload = {r["key"]: r for r in report["rows"] if r["key"].startswith("offload/")}
    assert all(0 < r["adam_ms"] <= r["ms"] and r["device_state_bytes"] == 0
               for r in offload.values())
    # the step's parts: the kernel inside the update, the first wait inside the waits
    assert all(0 < r["adam_kernel_ms"] <= r["adam_ms"] and 0 <= r["first_wait_ms"]
               <= r["wait_ms"] and r["other_ms"] > 0 and r["tail_ms"] >= 0
               for r in offload.values())
    # the tiny set: one batch of 2**20 elements or less in each 4 KiB-aligned slot half;
    # per parameter: a value and a gradient buffer of each parameter's size
    elements = report["elements"]
    assert offload["offload/per-parameter"]["staging_bytes"] == 2 * 4 * elements
    assert offload["offload/ring"]["batches"] == 1
    assert 2 * 4 * elements <= offload["offload/ring"]["staging_bytes"] \
        <= 2 * (4 * elements + report["tensors"] * 4096)      # one batch: one slot
    assert offload["offload/ring-8-slots"]["staging_bytes"] == \
        offload["offload/ring"]["staging_bytes"]
    assert report["host"]["affinity"] >= 1 and report["tensors"] == 28
    md = (tmp_path / "offload_probe.md").read_text()
    assert md.startswith("# OffloadAdam's parts on no GPU (dry run)")


def test_rows_picks_rows_by_key(tmp_path):
    done = _run("--device", "cpu", "--tiny", "--steps", "2", "--rows",
                "host/pageable,offload/ring-1M", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "offload_probe.json").read_text())
    assert [r["key"] for r in report["rows"]] == ["host/pageable", "offload/ring-1M"]
