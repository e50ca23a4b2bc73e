"""One framework's half of a run that switches frameworks (``test_resume_across.py``),
run as ``python resume_worker.py FRAMEWORK JOB.json`` in a process of its own.

JOB.json lists runs; each has a conformance ``case`` (spec, groups, parameters, seeded
gradients, total steps; ``native`` for a framework's own optimizer built by hand), the
``switch`` step and file names:

* ``"phase": "train"``: build the optimizer (``uo.build``'s auto path: a native class
  where one computes the spec; or the case's native one built by hand),
  take steps ``0 .. switch-1``, write the trajectory, the parameters (``.npz``: the
  model's weights travel on their own) and ``uo.save_state`` of the optimizer (and its
  lr scheduler) to ``state``;
* ``"phase": "resume"``: build ``uo.build``'s optimizer for the same spec and groups on
  the saved parameters, ``uo.load_state`` the file, take steps ``switch .. steps-1``,
  write the trajectory;
* ``"phase": "fresh"``: the same without loading the state (the control: a port that
  restarts the optimizer).

Recorded per step, as the conformance worker records: the lr, the parameters and the
state under the spec's names (none for a native optimizer built by hand).
"""

import json
import sys
from pathlib import Path

import numpy as np

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.trajectory import Recorder
from unified_opt.conformance.worker import driver_class


def run(framework: str, job: dict) -> None:
    driver_cls = driver_class(framework)
    case = Case.from_dict(job["case"])
    if job["phase"] == "train":
        arrays, steps = case.initial_params(), range(job["switch"])
    else:
        with np.load(job["params"], allow_pickle=False) as saved:
            arrays = {name: saved[name] for name in case.params}
        steps = range(job["switch"], case.steps)
    native = case.native if job["phase"] == "train" else None
    driver = driver_cls(case.spec, arrays, path="auto", total_steps=case.steps,
                        groups=case.groups or None, native=native)
    if job["phase"] == "resume":      # "fresh" restarts the optimizer from zero
        # the case's arrays are the same in every framework (no module keeps them
        # transposed): a square 2-D one is said to keep its layout, which its shape
        # cannot tell (uo.load_state refuses it otherwise)
        same = {name: (lambda a: a) for name, shape in case.params.items()
                if len(shape) == 2 and shape[0] == shape[1]}
        uo.load_state(driver.optimizer, job["state"], transform=same)
    recorder = Recorder()
    for t in steps:
        lr = driver.step(case.gradients(t))
        recorder.add(lr, driver.params_numpy(), driver.state_numpy())
    recorder.trajectory().save(job["trajectory"], compress=False)
    if job["phase"] == "train":
        np.savez(job["params"], **driver.params_numpy())
        uo.save_state(driver.optimizer, job["state"], lr_scheduler=driver.scheduler,
                      names=list(driver.params.items()))


def main(framework: str, job_file: str) -> None:
    for job in json.loads(Path(job_file).read_text()):
        run(framework, job)
        print(f"{framework}: {job['phase']} {Path(job['trajectory']).name}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
