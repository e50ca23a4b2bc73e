"""Builds on a device the conformance suite has not verified warn once (naming the
command that would verify it); verified ones do not; docs/devices.md lists the same
pairs as ``unified_opt.devices.VERIFIED``."""

import re
import warnings
from pathlib import Path

import pytest
from conftest import require

from unified_opt import devices


def test_an_unverified_pair_warns_once_naming_the_command(monkeypatch):
    monkeypatch.setattr(devices, "_warned", set())
    with pytest.warns(devices.UnverifiedDeviceWarning,
                      match=r"paddle on gpu:0 has not been verified .* `unified-opt "
                            r"conformance --device gpu:0 --backends paddle`"):
        devices.check_device("paddle", "gpu:0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        devices.check_device("paddle", "gpu:1")        # the same device type: once
        devices.check_device("torch", "cuda")          # verified
        devices.check_device("mindspore", "cpu")


@require("torch")
def test_a_torch_build_on_an_unverified_device_warns(monkeypatch):
    import torch

    import unified_opt as uo

    monkeypatch.setattr(devices, "_warned", set())
    meta = torch.nn.Parameter(torch.zeros(3, device="meta"))
    with pytest.warns(devices.UnverifiedDeviceWarning, match="torch on meta"):
        uo.build(uo.AdamW(), [meta])
    with warnings.catch_warnings():
        warnings.simplefilter("error", devices.UnverifiedDeviceWarning)
        uo.build(uo.AdamW(), [torch.nn.Parameter(torch.zeros(3))])


def test_the_docs_table_says_what_the_code_verifies():
    text = (Path(__file__).parent.parent / "docs" / "devices.md").read_text()
    table = text.split("| backend |")[1].split("\n\n")[0]
    rows = {line.split("|")[1].strip().lower(): line for line in table.splitlines()[2:]}
    names = {"torch": "torch", "paddle": "paddle", "mindspore": "mindspore"}
    columns = {"cpu": 2, "cuda": 3}
    for backend, device in devices.VERIFIED:
        cell = rows[names[backend]].split("|")[columns[device]]
        assert re.search(r"\bverified\b", cell) and "unverified" not in cell, (backend, device)


def test_the_cpu_info_is_the_first_model_and_every_listed_flag_in_order(tmp_path):
    # one reader for the kernels' cache key, torch's bfloat16 switch, the reports and the
    # test header; a second socket's flags join the first's
    (tmp_path / "x86").write_text("processor\t: 0\nmodel name\t: AMD EPYC 9B14\n"
                                  "flags\t\t: fpu sse2 avx2 avx512_bf16\nprocessor\t: 1\n"
                                  "model name\t: Other\nflags\t\t: fpu sse2 amx_bf16\n")
    assert devices.cpu_info(tmp_path / "x86") == (
        "AMD EPYC 9B14", ("fpu", "sse2", "avx2", "avx512_bf16", "amx_bf16"))
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd sve\n"
                                  "Model\t: Raspberry Pi 5\n")
    assert devices.cpu_info(tmp_path / "arm") == ("Raspberry Pi 5", ("fp", "asimd", "sve"))
    assert devices.cpu_info(tmp_path / "missing") == (None, ())
