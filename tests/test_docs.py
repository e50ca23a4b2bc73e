"""Generated documents are current."""

from pathlib import Path

from unified_opt.compatibility import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_compatibility_matrix_is_current():
    committed = (ROOT / "docs" / "compatibility.md").read_text()
    assert committed == markdown(), "run: unified-opt matrix --out docs/compatibility.md"


def test_matrix_lists_every_algorithm_and_preset():
    text = markdown()
    import unified_opt as uo

    for name in uo.algorithms():
        assert f"| `{name}` |" in text
    for qualified in uo.presets() + uo.presets(refused=True):
        assert f"| `{qualified}` |" in text
