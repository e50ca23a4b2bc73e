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
