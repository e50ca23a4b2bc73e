"""The conformance suite (installed as ``unified_opt.conformance``): cases, one worker
process per backend, comparison against the float64 numpy oracle with a tolerance
derived from the float32 noise floor, the failure explainer, and the reports.

``check`` (:mod:`.checker`) runs a user's own optimizer through a spec's streams;
``device=`` puts its parameters on an accelerator (:mod:`.device`: an unavailable one
is a ``DeviceUnavailable``, a ValueError).
"""

__all__ = ["CheckResult", "DeviceUnavailable", "check"]


def __getattr__(name: str):
    # lazily: ``python -m unified_opt.conformance.worker`` must not import the worker
    # module twice through the package
    if name == "DeviceUnavailable":
        from .device import DeviceUnavailable

        return DeviceUnavailable
    if name in __all__:
        from . import checker

        return getattr(checker, name)
    raise AttributeError(f"module 'unified_opt.conformance' has no attribute {name!r}")
