"""Test-session set-up.

The backend tests import their framework in this process. Importing paddle before
mindspore breaks mindspore (an undefined oneDNN symbol), while mindspore first is
fine, so mindspore (when installed) is imported here, before any test module.
Tests that compare two frameworks run each framework in its own worker process.
"""

import importlib.util

import pytest

if importlib.util.find_spec("mindspore") is not None:
    import mindspore  # noqa: F401  (import order: see the module docstring)


def require(framework: str):
    """Skip marker for tests that need ``framework`` installed."""
    return pytest.mark.skipif(importlib.util.find_spec(framework) is None,
                              reason=f"{framework} is not installed")
