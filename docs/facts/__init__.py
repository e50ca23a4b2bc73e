"""Figures the docs' prose quotes, computed at each docs build (``docs/conf.py``) from
the code and the committed results files, never typed into a page.

Each module reads one source and gives two things: ``pages()``, small Markdown files
(tables, paragraphs) that ``docs/conf.py`` writes into ``docs/_generated/`` (git ignores
it) and a page includes with MyST's ``{include}``; and ``substitutions()``, single
figures a sentence quotes as ``{{ name }}`` (MyST's ``substitution`` extension, filled
from ``myst_substitutions`` in ``docs/conf.py``).

* :mod:`.suite`: the conformance suite's version and counts, and the rule's constants
  (``unified_opt.conformance``);
* :mod:`.math_offline`: docs/building.md's "Math offline" table (``docs/math_offline.json``);
* :mod:`.speed`: the speed table ``uo.build`` reads (``unified_opt/speed_table.json``)
  and the CPU benchmarks behind backends.md's figures;
* :mod:`.cpu_kernels`: kernels.md's figures (``benchmarks/results/algorithm_step_time.json``,
  ``no_compiler.json``, ``conv_shapes.json``);
* :mod:`.gpu`: devices.md's figures, from the committed GPU run
  (``benchmarks/results/gpu_check_h100/``);
* :mod:`.runs`: the other pages' figures (``check_time.json``, ``porting_curves.json``).

    python docs/facts OUT_DIR     # write the files (what the build does)
"""

from __future__ import annotations

from pathlib import Path

from unified_opt.files import write_pages

from . import cpu_kernels, gpu, math_offline, runs, speed, suite

SOURCES = (suite, math_offline, speed, cpu_kernels, gpu, runs)


def pages() -> dict[str, str]:
    """Every generated file's name (under ``docs/_generated/``) and text."""
    out: dict[str, str] = {}
    for source in SOURCES:
        for name, text in source.pages().items():
            if name in out:
                raise ValueError(f"two sources write docs/_generated/{name}")
            out[name] = text
    return out


def substitutions() -> dict[str, str]:
    """Every ``{{ name }}`` a page may quote, and its text."""
    out: dict[str, str] = {}
    for source in SOURCES:
        for name, text in source.substitutions().items():
            if name in out:
                raise ValueError(f"two sources define the substitution {name!r}")
            out[name] = text
    return out


def write(out: Path) -> list[Path]:
    """Write every figure file into ``out`` (a file only when its text changed)."""
    return write_pages(out, pages())
