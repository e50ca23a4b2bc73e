"""Backend adapters, one subpackage per framework (installed as ``unified_opt.backends``).

Each subpackage has the same shape, and imports its framework only when a call needs it:

``__init__.py``   ``BACKEND``, the :class:`unified_opt.backend.Backend` of the framework:
                  the conditions around each native class, the build, state reading
``classes``       one :class:`unified_opt.native.NativeClass` descriptor per native class:
                  preset, lowerings (conditions and ``to_native``), state names, quirks
``ops.py``        the framework's binding of :class:`unified_opt.ops.Ops`
``optimizer.py``  the optimizer class of that framework that runs a spec's own update
``native.py``     building a native class from its descriptor; reading its state

``uo.backends()`` (the installed backends) is public API, and so is this package's
name: importing a subpackage makes ``unified_opt.backends`` this module, so the module
is callable and answers ``uo.backends()`` itself.
"""

import sys
import types

from unified_opt.backend import installed


class _CallablePackage(types.ModuleType):
    def __call__(self) -> list[str]:
        """The backends whose framework is installed (found without importing it)."""
        return installed()


sys.modules[__name__].__class__ = _CallablePackage
