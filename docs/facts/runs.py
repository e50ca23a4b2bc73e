"""The other pages' figures: how long ``unified-opt check`` takes and what it answered
(``benchmarks/results/check_time.json``, docs/ci.md and docs/conformance.md) and how
closely the ported run's loss follows the uninterrupted one (``docs/porting_curves.json``,
docs/porting.md)."""

from __future__ import annotations

from .common import RESULTS, ROOT, load, num

UNINTERRUPTED = "torch, uninterrupted"
RESUMED = ("torch -> Paddle (uo.resume)", "torch -> MindSpore (uo.resume)")


def check_time() -> dict[str, str]:
    measured = load(RESULTS / "check_time.json")

    def slowest(passing: bool) -> str:
        return num(max(row["process_s"] for row in measured["rows"]
                       if row["expected_pass"] is passing), 0)

    return {"check_pass_s": f"{slowest(True)} s", "check_fail_s": f"{slowest(False)} s",
            "check_pass_target": f"{num(measured['pass_target_s'])} s",
            "check_fail_target": f"{num(measured['fail_target_s'])} s"}


def porting_gap() -> str:
    """The largest relative gap between a resumed run's loss and the uninterrupted
    run's, over the steps after the switch (the resumed curves hold only those)."""
    curves = load(ROOT / "docs" / "porting_curves.json")
    base = curves["losses"][UNINTERRUPTED]
    gaps = []
    for name in RESUMED:
        resumed = curves["losses"][name]
        tail = base[len(base) - len(resumed):]
        gaps.append(max(abs(a - b) / abs(b) for a, b in zip(resumed, tail)))
    return f"{max(gaps):.1e}"


def pages() -> dict[str, str]:
    return {}


def substitutions() -> dict[str, str]:
    came = [row for row in load(RESULTS / "check_time.json")["rows"]
            if row["row"] == "came_pass"][0]["answer"]
    # the answer's first two lines, as code: what was compared, and how the state was read
    return {**check_time(), "porting_gap": porting_gap(),
            "check_came_answer": f"`{came[0]}`", "check_came_mapped": f"`{came[1]}`"}
