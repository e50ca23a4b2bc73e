"""Backend adapters, one subpackage per framework (installed as ``unified_opt.backends``).

Each subpackage has the same shape:

``lowering.py``   the table (native class, argument mapping, exactness conditions,
                  state-name map) and ``decide_for(spec)``; imports no framework.
``ops.py``        the framework's binding of :class:`unified_opt.ops.Ops`.
``optimizer.py``  the optimizer class of that framework that runs a spec's own update.
``native.py``     building the native class from a table row; reading its state.
``driver.py``     drives a built optimizer with numpy gradients (conformance worker).
``__init__.py``   ``build(spec, named_params, path=, options=)``; imports the framework
                  only when called.
"""

import sys
import types


class _CallablePackage(types.ModuleType):
    """``uo.backends()`` is public API, and importing this package sets the attribute
    ``unified_opt.backends`` to it; calling the package keeps ``uo.backends()`` working."""

    def __call__(self) -> list[str]:
        from unified_opt.build import backends

        return backends()


sys.modules[__name__].__class__ = _CallablePackage
