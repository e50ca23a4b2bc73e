"""The conformance suite (installed as ``unified_opt.conformance``): cases, one worker
process per backend, comparison against the float64 numpy oracle with a tolerance
derived from the float32 noise floor, the failure explainer, and the reports.

``check`` (:mod:`.checker`) runs a user's own optimizer through a spec's streams.
"""

__all__ = ["CheckResult", "check"]


def __getattr__(name: str):
    # lazily: ``python -m unified_opt.conformance.worker`` must not import the worker
    # module twice through the package
    if name in __all__:
        from . import checker

        return getattr(checker, name)
    raise AttributeError(f"module 'unified_opt.conformance' has no attribute {name!r}")
