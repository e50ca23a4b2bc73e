"""benchmarks/gpu_step_time.py: without CUDA it says so and exits 0; on the CPU with a
tiny parameter set every row's code runs (a smoke run into a temporary folder); the
parameter set is GPT-2 small's; the issue's targets are judged as written."""

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require

pytestmark = require("torch")

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_step_time.py"
sys.path.insert(0, str(BENCHMARKS))

import gpu_step_time as bench  # noqa: E402


def _run(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}        # hides a GPU where one is
    done = _run("--out", str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        "gpu_step_time: CUDA is not available here; nothing measured "
        "(--device cpu --tiny runs the rows' code on the CPU)"]
    assert list(tmp_path.iterdir()) == []


def test_the_parameter_set_is_gpt2_small():
    shapes = bench.gpt2_shapes()
    assert len(shapes) == 148
    assert sum(math.prod(s) for s in shapes) == 124_439_808
    assert shapes[:2] == [(50257, 768), (1024, 768)] and shapes[-2:] == [(768,), (768,)]


def test_every_row_runs_on_the_cpu_with_a_tiny_set(tmp_path):
    """Engines "auto" and False (True and "inductor" are the same row code with another
    compile option, and compile for a minute on the CPU)."""
    done = _run("--device", "cpu", "--tiny", "--engines", "auto,false", "--warmup", "1",
                "--steps", "3", "--slow-steps", "3", "--row-seconds", "0.1",
                "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_step_time.json").read_text())
    listed = [line.split()[0] for line in
              _run("--list", "--engines", "auto,false").stdout.splitlines()]
    assert [r["key"] for r in report["rows"]] == listed and len(listed) == 37
    for row in report["rows"]:
        assert "error" not in row, row
        assert "ms" in row or row.get("skipped") == "not installed", row
        if "ms" in row:     # the time until each step returned
            assert row["host_ms"] > 0, row
    by_key = {r["key"]: r for r in report["rows"]}
    assert by_key["torch/adamw-fused"]["ratio"] == 1.0
    assert by_key["uo/adamw"]["path"] == "torch.optim.AdamW"
    # the classes built explicitly, whatever the default build takes
    assert by_key["native/adamw"]["path"] == "torch.optim.AdamW"
    assert by_key["native/adafactor"]["path"] == "torch.optim.Adafactor"
    assert by_key["own/lamb/auto"]["path"] == "own"
    assert by_key["offload/adam"]["path"].endswith("OffloadAdam")
    for key in ("offload/adam-values-kept", "offload/adam-copy-engine", "offload/adam-table",
                "offload/adam-on-device"):
        assert by_key[key]["path"].endswith("OffloadAdam")
    assert by_key["own/came/false"]["state_bytes"] > 0
    assert report["parameters"]["tensors"] == 28
    md = (tmp_path / "gpu_step_time.md").read_text()
    assert md.startswith("# Optimizer step time on ") and "`own/lion/auto`" in md
    assert "torch " in md and "triton " in md


def test_a_row_that_raises_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    def broken(self, row):
        raise RuntimeError("planted failure")

    rows = bench.all_rows()
    for row in rows:
        if row.key == "uo/adamw":
            row.run = broken
    monkeypatch.setattr(bench, "all_rows", lambda: rows)
    assert bench.main(["--device", "cpu", "--tiny", "--rows", "uo/*,torch/*", "--warmup", "1",
                       "--steps", "3", "--row-seconds", "0.1", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_step_time.json").read_text())
    by_key = {r["key"]: r for r in report["rows"]}
    assert by_key["uo/adamw"]["error"] == "RuntimeError: planted failure"
    assert "ms" in by_key["uo/adafactor"] and "ms" in by_key["torch/adamw-foreach"]


def test_filters_keep_the_baseline_and_refuse_unknown_engines():
    args = argparse.Namespace(rows="peer/came/*", engines="auto")
    keys = [r.key for r in bench.selected(bench.all_rows(), args)]
    assert keys == ["torch/adamw-fused", "peer/came/pytorch_optimizer.CAME",
                    "peer/came/came_pytorch.CAME"]
    args.rows, args.engines = "", "fast"
    with pytest.raises(SystemExit, match="unknown"):
        bench.selected(bench.all_rows(), args)


def _row(key, algorithm, ms, **kw):
    return {"key": key, "algorithm": algorithm, "what": key, "ms": ms, **kw}


def test_targets_are_judged_against_the_baseline_the_fastest_peer_and_the_host_adam():
    rows = [_row("torch/adamw-fused", "adamw", 1.0, ratio=1.0),
            _row("own/adamw/auto", "adamw", 1.3, ratio=1.3, first_step_s=5.0),
            _row("own/adamw/true", "adamw", 1.31, ratio=1.31, first_step_s=5.0),
            _row("own/lion/auto", "lion", 1.1, ratio=1.1, first_step_s=31.0),
            _row("peer/lamb/a", "lamb", 1.9), _row("peer/lamb/b", "lamb", 1.7),
            _row("own/lamb/auto", "lamb", 1.8, ratio=1.8, first_step_s=1.0),
            _row("own/lamb/true", "lamb", 1.6, ratio=1.6, first_step_s=1.0),
            _row("uo/adafactor", "adafactor", 2.4, ratio=2.4, first_step_s=100.0),
            {"key": "own/came/auto", "algorithm": "came", "what": "x", "error": "boom"},
            _row("offload/host-adam", "adam_offload", 40.0, ratio=40.0),
            _row("offload/adam-copy-engine", "adam_offload", 41.0, ratio=41.0, state_bytes=0),
            _row("offload/adam-on-device", "adam_offload", 47.0, ratio=47.0, state_bytes=0),
            _row("offload/adam", "adam_offload", 46.0, ratio=46.0, state_bytes=0)]
    bench.judge(rows)
    met = {r["key"]: r.get("met") for r in rows}
    assert met == {"torch/adamw-fused": None, "own/adamw/auto": True, "own/adamw/true": False,
                   "own/lion/auto": False,             # first step over 30 s
                   "peer/lamb/a": None, "peer/lamb/b": None,
                   "own/lamb/auto": False,             # slower than peer b
                   "own/lamb/true": True,
                   "uo/adafactor": True,               # a default build: no first-step bar
                   "own/came/auto": None, "offload/host-adam": None,
                   "offload/adam-copy-engine": None,   # a measurement: no target
                   "offload/adam-on-device": False,    # over 1.15 x 40 = 46
                   "offload/adam": True}
    assert "peer/lamb/b (1.7 ms)" in rows[6]["target"]
    rows[-1]["state_bytes"] = 8
    bench.judge(rows)
    assert rows[-1]["met"] is False
    bench.judge(rows, on_gpu=False)
    assert rows[-1]["met"] is True


def test_the_host_profile_says_where_the_own_step_s_host_time_goes(tmp_path):
    """benchmarks/own_host_profile.py: without CUDA it says so and exits 0; on the CPU
    under Triton's interpreter it profiles the own step of a tiny set."""
    script = BENCHMARKS / "own_host_profile.py"
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "none")],
                          capture_output=True, text=True, env=hidden, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("own_host_profile: CUDA is not available here; nothing "
                                   "measured (--device cpu with TRITON_INTERPRET=1 runs it "
                                   "on the CPU)")
    assert not (tmp_path / "none").exists()
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--out",
                           str(tmp_path / "none")], capture_output=True, text=True,
                          env={**hidden, "TRITON_INTERPRET": "0"}, timeout=300)
    assert done.returncode == 2 and "set TRITON_INTERPRET=1" in done.stderr
    pytest.importorskip("triton")
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--algorithms",
                           "adamw", "--steps", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600,
                          env={**hidden, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "own_host_profile.txt").read_text()
    assert text.startswith("## adamw: host ") and "medians of 2" in text
    assert "cuda.py" in text and "(run)" in text        # the engine's step, profiled


def test_the_gpu_check_shards_are_the_whole_suite():
    """``benchmarks/gpu_check.py`` runs the CUDA conformance in shards of algorithms: every
    registered algorithm is in exactly one (those registered after the shards were
    weighed go in a last one)."""
    import gpu_check

    import unified_opt as uo

    listed = [a for shard in gpu_check.conformance_shards() for a in shard]
    assert sorted(listed) == sorted(uo.algorithms()) and len(set(listed)) == len(listed)


def test_muon_is_judged_against_its_peer():
    """Muon's own row has one target: faster than torch's Muon and AdamW together."""
    rows = [{"key": "uo/muon", "algorithm": "muon", "ms": 9.0, "ratio": 3.0},
            {"key": "peer/muon/torch.optim.Muon+AdamW", "algorithm": "muon", "ms": 10.0,
             "what": "torch.optim.Muon (matrices) + torch.optim.AdamW (the rest)"}]
    bench.judge(rows)
    assert rows[0]["met"] is True and rows[0]["target"].startswith("< torch.optim.Muon")
    rows[0]["ms"] = 11.0
    bench.judge(rows)
    assert rows[0]["met"] is False
