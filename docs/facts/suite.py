"""The conformance suite's version and size, and the constants of its rule, read from
``unified_opt.conformance`` (docs/conformance.md, docs/ci.md)."""

from __future__ import annotations

from .common import num


def suite() -> str:
    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.cases.case import SUITE_VERSION

    cases = default_cases()
    algorithms = {case.spec.name for case in cases}
    return (f"The suite is version {SUITE_VERSION}: {len(cases)} cases over "
            f"{len(algorithms)} algorithms.\n")


def pages() -> dict[str, str]:
    return {"suite.md": suite()}


def substitutions() -> dict[str, str]:
    import unified_opt as uo
    from unified_opt.conformance.compare import ULPS, K
    from unified_opt.conformance.distributed import LAUNCH_TIMEOUT
    from unified_opt.conformance.progress import EVERY
    from unified_opt.conformance.series import PER_DECADE
    from unified_opt.conformance.worker import FAILING_TRAJECTORY_BUDGET

    return {
        # the rule: a run passes while its error stays within K floors
        "rule_k": num(K),
        "rule_ulps": num(ULPS),
        "trajectory_budget": f"{num(FAILING_TRAJECTORY_BUDGET / 2**20)} MiB",
        "progress_every": f"{num(EVERY)} s",
        "launch_timeout": f"{num(LAUNCH_TIMEOUT)} s",
        "schedule_presets": str(len(uo.schedules.presets())),
        # a report's plotted ratio is read back within half a code of its log grid
        "series_resolution": f"{num((10 ** (1 / (2 * PER_DECADE)) - 1) * 100, 1)} %",
    }
