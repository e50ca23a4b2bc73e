"""``python docs/facts OUT_DIR``: write the generated figure files into OUT_DIR."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # run as a folder: make the package importable by its own name
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from facts import write
else:
    from . import write

for path in write(Path(sys.argv[1])):
    print(f"wrote {path}")
