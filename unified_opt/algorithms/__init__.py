"""One module per algorithm: hyperparameters, math (LaTeX), the reference update and
its record (:mod:`unified_opt.records`).

Every module here whose name does not start with ``_`` is imported, and the spec classes
it registers are this package's names (``uo.AdamW``, ...): a new algorithm is its module
(and its cases), with no list to extend (docs/contributing.md).
"""

import importlib as _importlib
import pkgutil as _pkgutil

from ..spec import Spec as _Spec

__all__: list[str] = []
for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__) if m.name[0] != "_"):
    _loaded = _importlib.import_module(f"{__name__}.{_module}")
    for _value in vars(_loaded).values():
        if (isinstance(_value, type) and issubclass(_value, _Spec) and _value is not _Spec
                and _value.__module__ == _loaded.__name__ and "name" in vars(_value)):
            globals()[_value.__name__] = _value
            __all__.append(_value.__name__)
__all__.sort()
