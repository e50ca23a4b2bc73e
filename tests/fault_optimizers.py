"""torch optimizers that take down the process running them (at their third step, or at
its end), for the runner's crash and timeout isolation tests (``test_runner_faults.py``).

A conformance case runs one as a native optimizer built by hand
(``Native("fault_optimizers.ExitAtStep3", framework="torch")``); the worker imports this
module by name, so the test puts ``tests/`` on the worker's ``PYTHONPATH``. Each is
``torch.optim.SGD`` until the fault: the steps before it are plain SGD steps.
"""

import atexit
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

FAULT_STEP = 3


class _FaultAtStep3(torch.optim.SGD):
    def step(self, closure=None):
        self.steps_taken = getattr(self, "steps_taken", 0) + 1
        if self.steps_taken == FAULT_STEP:
            self.fault()
        return super().step(closure)

    def fault(self) -> None:
        raise NotImplementedError


class ExitAtStep3(_FaultAtStep3):
    """Ends the process with exit status 3, as a native crash does (no Python cleanup)."""

    def fault(self) -> None:
        print("ExitAtStep3: exiting with status 3", file=sys.stderr, flush=True)
        os._exit(3)


class ExitAtProcessEnd(torch.optim.SGD):
    """Steps correctly, then ends the process with exit status 3 when Python shuts down,
    as a framework that crashes in its teardown does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        atexit.register(os._exit, 3)


class HangAtStep3(_FaultAtStep3):
    """Sleeps forever (a deadlock), after starting a child that sleeps too, holding the
    worker's stdout; its pid goes to the file ``$FAULT_CHILD_PID_FILE`` names."""

    def fault(self) -> None:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        Path(os.environ["FAULT_CHILD_PID_FILE"]).write_text(str(child.pid))
        while True:
            time.sleep(60)


class KilledAtStep3(_FaultAtStep3):
    """SIGKILLs its own process, as the kernel's out-of-memory killer does."""

    def fault(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)
