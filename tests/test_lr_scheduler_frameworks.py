"""``uo.lr_scheduler`` driving optimizers ``uo.build`` made on Paddle and MindSpore,
native and own paths, each framework's runs in a process of its own
(``lr_scheduler_worker.py``).

Every group's lr at every step must be its ``uo.schedules`` preset's (the same Python
float: the scheduler writes it into ``param_groups``), and the parameters after 20 steps
the float64 oracle's (``uo.reference`` of the spec with that schedule, per group: the
groups are independent) within float32 rounding. The same oracle at the groups'
constant lrs is far outside that margin: a scheduler whose lr the step ignored fails.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require
from lr_scheduler_cases import CASES, STEPS, gradient, group_lrs, initial

import unified_opt as uo

WORKER = Path(__file__).parent / "lr_scheduler_worker.py"
RTOL, ATOL = 2e-5, 2e-6     # float32 rounding over 20 steps of values ~1


def _oracle(case, schedule_of_parameter):
    spec = CASES[case][0]
    out = []
    for i, value in enumerate(initial()):
        ref = uo.reference(spec.replace(lr=schedule_of_parameter(i)), {"p": value},
                           dtype="float64")
        for t in range(STEPS):
            ref.step({"p": gradient(t, i)})
        out.append(ref.params["p"])
    return out


RUNS = [pytest.param(fw, case, path, marks=require(fw), id=f"{fw}-{case}-{path}")
        for fw in ("paddle", "mindspore") for case in CASES for path in CASES[case][3]]


_RESULTS: dict[str, dict] = {}


def _results(framework):
    """Every run of ``framework``, made once, in one process."""
    if framework not in _RESULTS:
        done = subprocess.run([sys.executable, str(WORKER), framework], cwd=WORKER.parent,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        _RESULTS[framework] = json.loads(done.stdout.strip().splitlines()[-1])
    return _RESULTS[framework]


@pytest.mark.parametrize("framework, case, path", RUNS)
def test_a_uo_optimizer_steps_with_the_schedulers_lr(framework, case, path):
    run = _results(framework)[f"{case}/{path}"]
    assert "error" not in run, run
    lrs = group_lrs(framework, path)
    schedules = [CASES[case][2](lr, g) for g, lr in enumerate(lrs)]
    assert run["lrs"] == [[s(t) for s in schedules] for t in range(STEPS)]
    # the parameters are group 0's and group 1's, or both in one group
    want = _oracle(case, lambda i: schedules[min(i, len(lrs) - 1)])
    for got, expected in zip(run["params"], want):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=RTOL, atol=ATOL)
    constant = _oracle(case, lambda i: lrs[min(i, len(lrs) - 1)])
    assert any(not np.allclose(np.asarray(got), c, rtol=RTOL, atol=ATOL)
               for got, c in zip(run["params"], constant))


@require("mindspore")
def test_a_mindspore_experimental_class_follows_the_scheduler_as_its_own_scheduler_drives_it():
    # the class keeps each group's lr as a float32 Parameter: uo's scheduler writes it in
    # place, so the class steps exactly as under MindSpore's own StepLR
    done = subprocess.run([sys.executable, str(WORKER), "mindspore-experimental"],
                          cwd=WORKER.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert runs["uo"]["lrs"] == runs["mindspore"]["lrs"]
    assert runs["uo"]["lrs"][3] == np.float32(0.05)          # the step at 3 steps
    assert runs["uo"]["params"] == runs["mindspore"]["params"]
