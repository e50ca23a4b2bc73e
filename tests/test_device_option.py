"""The device option of the conformance suite (issue 20): ``unified-opt conformance
--device``, ``uo.conformance.check(..., device=...)``, the pytest plugin's
``--uo-device``, and how the reports record the device and the runs not run there.

On a machine without CUDA (CI) the accelerators are unavailable: each entry point
refuses them with the device and the backend named, exit status 2 on the command line,
before any case runs; ``cpu`` runs as before. The tests that need a device to be absent
skip where it is present."""

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import require

import unified_opt as uo
from unified_opt import cli
from unified_opt.conformance import runner
from unified_opt.conformance.cases import Case, default_cases
from unified_opt.conformance.device import (
    CPU,
    Device,
    DeviceUnavailable,
    framework_device,
    parse_device,
    place,
    probe,
)
from unified_opt.conformance.html import html_report
from unified_opt.conformance.report import build_report, junit, markdown, problems_text


def _has_cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


no_cuda = pytest.mark.skipif(_has_cuda(), reason="CUDA is available here")


# -- writing a device -----------------------------------------------------------------

@pytest.mark.parametrize("text, kind, index", [
    ("cpu", "cpu", None), ("CPU", "cpu", None), ("cuda", "cuda", 0), ("gpu", "cuda", 0),
    ("cuda:1", "cuda", 1), ("GPU:3", "cuda", 3), (" npu:0 ", "npu", 0), ("npu", "npu", 0)])
def test_parse_device_reads_the_kinds_aliases_and_indices(text, kind, index):
    assert parse_device(text) == Device(kind, index)


def test_a_device_prints_as_written_with_its_index():
    assert [str(parse_device(t)) for t in ("cpu", "gpu", "cuda:2", "npu")] == \
        ["cpu", "cuda:0", "cuda:2", "npu:0"]
    assert parse_device(CPU) is CPU


@pytest.mark.parametrize("value", [0, None, 1.5, b"cuda", ["cuda"]])
def test_a_device_of_another_type_is_a_type_error_naming_the_argument(value):
    with pytest.raises(TypeError, match=r"^check: device must be a str .* got "):
        parse_device(value, "check: device")


@pytest.mark.parametrize("value, words", [
    ("tpu", "must be one of cpu, cuda (or gpu), npu"), ("", "must be one of"),
    ("cpu:0", "the CPU takes no index"), ("cuda:x", "must be a number >= 0"),
    ("cuda:-1", "must be a number >= 0"), ("cuda:", "must be a number >= 0")])
def test_a_wrong_device_is_a_value_error_naming_the_argument_and_value(value, words):
    with pytest.raises(ValueError) as error:
        parse_device(value, "--device")
    assert str(error.value).startswith("--device")
    assert words in str(error.value) and repr(value) in str(error.value)


def test_each_backend_spells_the_device_its_own_way():
    cuda1, npu0 = Device("cuda", 1), Device("npu", 0)
    assert [framework_device(b, cuda1) for b in ("torch", "paddle", "mindspore")] == \
        ["cuda:1", "gpu:1", "GPU:1"]
    assert [framework_device(b, npu0) for b in ("torch", "paddle", "mindspore")] == \
        ["npu:0", "npu:0", "Ascend:0"]
    assert [framework_device(b, CPU) for b in ("torch", "paddle", "mindspore")] == \
        ["cpu", "cpu", "CPU"]
    with pytest.raises(ValueError, match="no device placement for backend 'jax'"):
        framework_device("jax", cuda1)


# -- availability -----------------------------------------------------------------------

@require("torch")
def test_the_cpu_is_placed_with_its_name():
    placed = place("torch", "cpu")
    assert (placed.backend, placed.device, placed.framework_device) == ("torch", "cpu", "cpu")
    assert placed.name and placed.name != "unknown"


@require("torch")
@no_cuda
def test_cuda_without_cuda_is_unavailable_naming_device_and_backend():
    with pytest.raises(DeviceUnavailable) as error:
        place("torch", "gpu")
    assert str(error.value).startswith("device cuda:0 is not available to torch: torch ")
    assert "torch.cuda.is_available() is False" in str(error.value)
    assert isinstance(error.value, ValueError)


@require("torch")
@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None,
                    reason="torch_npu is installed")
def test_npu_on_torch_needs_torch_npu():
    with pytest.raises(DeviceUnavailable, match="device npu:0 is not available to torch: "
                       "torch runs on Ascend NPUs through the torch_npu package, which is "
                       "not installed"):
        place("torch", "npu")


@require("paddle")
def test_paddle_is_asked_in_a_process_of_its_own():
    imported_before = "paddle" in sys.modules
    placed = probe("paddle", "cpu")
    assert (placed.backend, placed.device, placed.framework_device) == ("paddle", "cpu", "cpu")
    with pytest.raises(DeviceUnavailable, match="device cuda:7 is not available to paddle: "):
        probe("paddle", "cuda:7")     # a CPU-only build, or fewer than 8 GPUs
    assert ("paddle" in sys.modules) == imported_before     # this process imported nothing


@require("torch")
@require("mindspore")
@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None,
                    reason="torch_npu is installed")
def test_probe_all_names_every_backend_that_refuses_the_device():
    from unified_opt.conformance.device import probe_all

    with pytest.raises(DeviceUnavailable) as error:
        probe_all(["torch", "mindspore"], "npu:1")
    parts = str(error.value).split("; ")
    assert parts[0].startswith("device npu:1 is not available to torch: ")
    assert parts[1].startswith("device npu:1 is not available to mindspore: ")


@require("mindspore")
def test_mindspore_ascend_here_is_unavailable_or_placed():
    try:
        placed = probe("mindspore", "npu")
    except DeviceUnavailable as error:
        assert str(error).startswith("device npu:0 is not available to mindspore: ")
        assert "is_available('Ascend') is False" in str(error)
    else:
        assert placed.framework_device == "Ascend:0"


# -- the command line -----------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "unified_opt.cli", *args],
                          capture_output=True, text=True, timeout=600)


@require("torch")
@no_cuda
def test_cli_conformance_on_an_unavailable_device_exits_2_before_any_case(tmp_path):
    out = tmp_path / "report"
    run = _cli("conformance", "--backends", "torch", "--cases", "sgd_momentum",
               "--device", "cuda", "--out", str(out))
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("unified-opt conformance: error: device cuda:0 is not "
                                 "available to torch: ")
    assert "[torch]" not in run.stdout           # no worker started
    assert not out.exists()                      # nothing written


@pytest.mark.parametrize("device, words", [("tpu", "--device must be one of"),
                                           ("cuda:x", "--device: the index after cuda:")])
def test_cli_conformance_refuses_a_wrong_device_with_exit_2(device, words, capsys):
    assert cli.main(["conformance", "--device", device, "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("unified-opt conformance: error: ") and words in err


def test_help_names_the_device_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["conformance", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--device DEVICE where the parameters live: cpu (default), cuda or gpu (cuda:N)" \
        in text
    assert "exit status 2" in text.lower()


@require("torch")
def test_cli_conformance_on_the_cpu_records_the_device(tmp_path):
    out = tmp_path / "report"
    run = _cli("conformance", "--backends", "torch", "--cases", "sgd_momentum",
               "--device", "cpu", "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((out / "report.json").read_text())
    torch_entry = report["backends"]["torch"]
    assert (torch_entry["device"], torch_entry["framework_device"]) == ("cpu", "cpu")
    assert torch_entry["device_name"] and torch_entry["not_run"] == []
    assert report["summary"]["total"] == 2 and report["summary"]["pass"] == 2
    assert f"Device: torch on cpu ({torch_entry['device_name']})." in \
        (out / "report.md").read_text()
    properties = {p.get("name"): p.get("value")
                  for p in ET.parse(out / "junit.xml").getroot().iter("property")}
    assert properties == {"device": "cpu", "framework_device": "cpu",
                          "device_name": torch_entry["device_name"]}
    assert f"on cpu ({torch_entry['device_name']})" in (out / "report.html").read_text()


# -- the runner -------------------------------------------------------------------------

def _dgc_case() -> Case:
    return next(c for c in default_cases(["dgc_momentum"]) if c.workers > 1)


def test_distributed_cases_are_not_run_off_the_cpu_with_the_reason():
    case = _dgc_case()
    assert runner.not_run(case, CPU) is None
    reason = runner.not_run(case, Device("cuda", 0))
    assert reason == (f"not run on cuda:0: a distributed case ({case.workers} ranks) runs "
                      "on the CPU only (its ranks would need a device each)")
    single = Case(id="single", spec=uo.SGD(lr=0.1))
    assert runner.not_run(single, Device("cuda", 0)) is None


@require("torch")
@no_cuda
def test_the_runner_refuses_an_unavailable_device_before_touching_out(tmp_path):
    out = tmp_path / "never"
    with pytest.raises(DeviceUnavailable, match="device cuda:0 is not available to torch"):
        runner.run([Case(id="single", spec=uo.SGD(lr=0.1))], ["torch"], out, device="cuda")
    assert not out.exists()
    with pytest.raises(ValueError, match="device must be one of"):
        runner.run([Case(id="single", spec=uo.SGD(lr=0.1))], ["torch"], out, device="tpu")


@require("torch")
def test_a_worker_refuses_distributed_cases_off_the_cpu(tmp_path):
    from unified_opt.conformance.drivers.torch import TorchDriver
    from unified_opt.conformance.worker import run_all

    with pytest.raises(ValueError, match=r"distributed cases run on the CPU only, not on "
                       r"cuda:0: \['dgc_"):
        run_all(TorchDriver, "torch", [_dgc_case()], tmp_path, say=lambda line: None,
                device="cuda")


def _report_with_a_run_left_out() -> dict:
    """A report as the runner writes it on cuda:0: one result, one case not run."""
    single, dgc = Case(id="single", spec=uo.SGD(lr=0.1)), _dgc_case()
    reason = runner.not_run(dgc, Device("cuda", 0))
    result = {"case": "single", "algorithm": "sgd", "backend": "torch", "path": "auto",
              "status": "pass", "lowering": {"path": "native", "native": "torch.optim.SGD"},
              "comparison": {"passed": True, "worst_ratio": 1.5, "worst_quantity": "param:w",
                             "worst_step": 3, "first_failing_step": None,
                             "failure": None, "detail": ""},
              "explanation": None, "error": None, "known": None, "seconds": 0.2}
    worker = {"exit_code": 0, "seconds": 3.0, "framework_version": "2.13", "error": None,
              "device": "cuda:0", "framework_device": "cuda:0", "device_name": "NVIDIA H200",
              "not_run": [{"case": dgc.id, "path": p, "reason": reason} for p in dgc.paths]}
    return build_report([single, dgc], ["torch"], {"torch": worker}, [result])


def test_the_reports_name_the_device_and_the_runs_not_run():
    report = _report_with_a_run_left_out()
    dgc = _dgc_case()
    assert report["summary"] == {"total": 1, "pass": 1, "fail": 0, "error": 0, "known": 0}
    md = markdown(report)
    assert "Device: torch on cuda:0 (NVIDIA H200)." in md
    assert f"| {dgc.id} | not run |" in md
    # each of the case's paths is listed (auto, own, native), as the runner lists them
    assert dgc.paths == ("auto", "own", "native")
    assert (f"- torch: {dgc.id} (auto), {dgc.id} (own), {dgc.id} (native): not run on "
            "cuda:0: a distributed case (2 ranks) runs on the CPU only") in md
    root = ET.fromstring(junit(report))
    assert (root.get("tests"), root.get("skipped"), root.get("failures")) == ("4", "3", "0")
    skipped = [c for c in root.iter("testcase") if c.find("skipped") is not None]
    assert [c.get("name") for c in skipped] == [f"{dgc.id}[torch-auto]", f"{dgc.id}[torch-own]",
                                                f"{dgc.id}[torch-native]"]
    assert skipped[0].find("skipped").get("message").startswith("not run on cuda:0: ")
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties == {"device": "cuda:0", "framework_device": "cuda:0",
                          "device_name": "NVIDIA H200"}
    text = problems_text(report)
    assert "device: torch on cuda:0 (NVIDIA H200)" in text
    assert f"NOT RUN 1 case(s) on torch ({dgc.id}): not run on cuda:0" in text
    page = html_report(report)
    assert "on cuda:0 (NVIDIA H200); 3 run(s) not run there: not run on cuda:0" in page


# -- check() ----------------------------------------------------------------------------

def _torch_sgd(params):
    import torch

    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


@require("torch")
@pytest.mark.parametrize("device, error, words", [
    (0, TypeError, "check: device must be a str such as 'cpu', 'cuda' or 'cuda:1', got 0"),
    ("tpu", ValueError, "check: device must be one of cpu, cuda (or gpu), npu"),
    ("cpu:1", ValueError, "check: device: the CPU takes no index, got 'cpu:1'")])
def test_check_refuses_a_wrong_device_before_anything_runs(device, error, words):
    calls = []

    def factory(params):
        calls.append(params)
        return _torch_sgd(params)

    with pytest.raises(error) as raised:
        uo.conformance.check(factory, uo.SGD(lr=0.1, momentum=0.9), backend="torch",
                             device=device)
    assert words in str(raised.value)
    assert calls == []


@require("torch")
@no_cuda
def test_check_on_an_unavailable_device_names_device_and_backend():
    with pytest.raises(uo.conformance.DeviceUnavailable,
                       match="device cuda:0 is not available to torch"):
        uo.conformance.check(_torch_sgd, uo.SGD(lr=0.1, momentum=0.9), backend="torch",
                             device="cuda")


@require("torch")
def test_check_on_the_cpu_passes_and_records_the_device():
    placed = []

    def factory(params):
        placed.append({str(p.device) for p in params})
        return _torch_sgd(params)

    result = uo.conformance.check(factory, uo.SGD(lr=0.1, momentum=0.9), backend="torch",
                                  device="cpu", nonfinite=False)
    assert result.passed and result.worst_ratio <= 8.0
    assert placed == [{"cpu"}] * 4          # every stream: three adversarial, one quiet
    entry = result.report["backends"]["torch"]
    assert (entry["device"], entry["framework_device"]) == ("cpu", "cpu")


@require("torch")
@no_cuda
def test_cli_check_on_an_unavailable_device_exits_2(capsys):
    code = cli.main(["check", "test_device_option:_torch_sgd", "--spec",
                     "sgd(lr=0.1, momentum=0.9)", "--backend", "torch", "--device", "cuda"])
    assert code == 2
    assert capsys.readouterr().err.startswith(
        "unified-opt check: error: device cuda:0 is not available to torch")


# -- the pytest plugin -----------------------------------------------------------------

#: the plugin loads through the package's ``pytest11`` entry point: a checkout on the
#: path without the package installed (the GPU machine's run) has none
plugin_installed = pytest.mark.skipif(
    not any(e.name == "unified-opt" for e in importlib.metadata.entry_points(group="pytest11")),
    reason="unified-opt is not installed: no pytest11 entry point loads its plugin")


@plugin_installed
def test_the_plugin_refuses_a_wrong_device_as_a_usage_error(tmp_path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--uo-device", "tpu", str(tmp_path)], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 4, run.stdout + run.stderr       # pytest's usage error
    assert "--uo-device must be one of cpu, cuda (or gpu), npu" in run.stderr


@plugin_installed
@require("torch")
@no_cuda
def test_the_plugin_refuses_an_unavailable_device_for_the_suite(tmp_path):
    (tmp_path / "conftest.py").write_text("")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--uo-conformance", "--uo-backends", "torch", "--uo-cases",
                          "sgd_momentum", "--uo-device", "cuda", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 4, run.stdout + run.stderr
    assert "--uo-device: device cuda:0 is not available to torch" in run.stderr
