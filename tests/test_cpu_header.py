"""The CI guard: a test run starts by naming the CPU, its vector extensions and the
settings that limit the frameworks' vector code (``conftest.cpu_lines``), with ``-q``
as without, so that a failure can be tied to a CPU (issue 24: a margin that held on an
AVX-512 machine failed on one without)."""

import subprocess
import sys
from pathlib import Path

from conftest import LIMITS, cpu_lines

ROOT = Path(__file__).parent.parent

X86 = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 23
model name	: AMD EPYC 7B12
flags		: fpu vme sse sse2 ht syscall ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2
processor	: 1
model name	: AMD EPYC 7B12
flags		: fpu vme sse sse2 ht syscall ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 bmi2
"""
ARM = """processor	: 0
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 crc32 atomics asimdhp sve sve2
CPU implementer	: 0x41
"""


def test_the_lines_name_the_model_and_only_the_vector_extensions(tmp_path, monkeypatch):
    for name in LIMITS:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "x86").write_text(X86)
    model, extensions = cpu_lines(tmp_path / "x86")
    assert model.startswith("cpu: AMD EPYC 7B12 (")
    assert extensions == "cpu vector extensions: sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2"
    (tmp_path / "arm").write_text(ARM)
    lines = cpu_lines(tmp_path / "arm")
    assert lines[1] == "cpu vector extensions: asimd asimdhp sve sve2"
    # no /proc/cpuinfo (macOS, Windows): what platform says
    lines = cpu_lines(tmp_path / "missing")
    assert lines[0].startswith("cpu: ") and lines[1] == "cpu vector extensions: not listed"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert cpu_lines(tmp_path / "x86")[2] == \
        "cpu vector code limited by: ATEN_CPU_CAPABILITY=avx2, MKL_ENABLE_INSTRUCTIONS=AVX2"


def test_a_run_starts_with_the_cpu_quiet_or_not():
    expected = cpu_lines()
    assert "avx" in expected[1] or "asimd" in expected[1] or sys.platform != "linux"
    for flags in (["-q"], []):
        out = subprocess.run([sys.executable, "-m", "pytest", *flags, "--collect-only",
                              "-p", "no:cacheprovider", __file__],
                             cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
        lines = out.splitlines()
        at = lines.index(expected[0])
        assert lines[at:at + len(expected)] == expected, out
        assert sum(line.startswith("cpu: ") for line in lines) == 1, out
        if flags:
            assert at == 0, out       # the first thing a quiet run prints
