"""Runs optimizer constructions from a script (``test_port.py``) in one framework, as
``python port_worker.py FRAMEWORK JOB.json``, in a process of its own.

JOB.json: ``code`` (statements that assign ``optimizer`` and, where there is one,
``scheduler``, with ``model`` standing for a module whose parameters are the case's),
``namespace`` (module-level constants the code names), the conformance ``case`` (its
parameters and seeded gradients, its steps), ``trajectory`` (where to write the lr and
parameters of every step) and ``spec`` (a file for what ``uo.from_native`` reads from
the optimizer, or null: the original script's side writes the oracle's spec there).
"""

import json
import sys
from pathlib import Path

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.trajectory import Recorder
from unified_opt.conformance.worker import driver_class


class Model:
    """What the script's ``model`` is to its optimizer construction."""

    def __init__(self, params):
        self.params = list(params)

    def parameters(self):
        return list(self.params)

    trainable_params = parameters


def run(framework: str, job: dict) -> None:
    case = Case.from_dict(job["case"])
    made = {}

    def factory(params):
        namespace = {**job["namespace"], "model": Model(params)}
        exec(job["code"], namespace)       # the script's own code, as it was written
        made.update(namespace)
        return namespace["optimizer"], namespace.get("scheduler")

    driver = driver_class(framework)(case.spec, case.initial_params(), factory=factory,
                                     total_steps=case.steps)
    if job["spec"]:
        spec, groups = uo.from_native(made["optimizer"], made.get("scheduler"))
        assert not groups
        Path(job["spec"]).write_text(json.dumps(spec.to_dict()))
    recorder = Recorder()
    for t in range(case.steps):
        lr = driver.step(case.gradients(t))
        recorder.add(lr, driver.params_numpy(), {})
    recorder.trajectory().save(job["trajectory"], compress=False)


if __name__ == "__main__":
    framework, job_file = sys.argv[1:]
    run(framework, json.loads(Path(job_file).read_text()))
