"""Runs a script's ``make_optimizer(model)`` (``test_port.py``'s script with parameter
groups, a clip and OneCycleLR, or its port) in one framework, as ``python
port_groups_worker.py FRAMEWORK JOB.json`` in a process of its own.

JOB.json: ``source`` (the script; its module body only defines functions and constants),
``case`` (parameters named as this framework's model names them, seeded gradients),
``clip`` (the torch loop's ``clip_grad_norm_`` max_norm, run before each step as the
original loop does; null where the ported optimizer clips itself), ``trajectory``, and
``spec`` (a file for what ``uo.from_native`` reads from the torch objects, or null).
"""

import json
import sys
from pathlib import Path

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.trajectory import Recorder
from unified_opt.conformance.worker import driver_class


class Model(dict):
    """A model as the script sees it: ``named_parameters()``, ``parameters()``,
    ``trainable_params()``; a mapping name -> parameter to ``uo.build``."""

    def named_parameters(self):
        return list(self.items())

    def parameters(self):
        return list(self.values())

    trainable_params = parameters


def run(framework: str, job: dict) -> None:
    case = Case.from_dict(job["case"])

    def factory(params):
        model = Model(zip(case.params, params))
        namespace = {}
        exec(job["source"], namespace)        # the script's own code, as it was written
        optimizer, scheduler = namespace["make_optimizer"](model)
        if job["spec"]:                       # read before the clip's hook is added
            spec, groups = uo.from_native(optimizer, scheduler, names=model)
            Path(job["spec"]).write_text(json.dumps({
                "spec": spec.to_dict(), "groups": [g.to_dict() for g in groups]}))
        if job["clip"] is not None:           # the torch loop: clip, then step
            import torch

            def clip(*_):
                torch.nn.utils.clip_grad_norm_(model.parameters(), job["clip"])

            optimizer.register_step_pre_hook(clip)
        return optimizer, scheduler

    driver = driver_class(framework)(case.spec, case.initial_params(), factory=factory,
                                     total_steps=case.steps)
    recorder = Recorder()
    for t in range(case.steps):
        lr = driver.step(case.gradients(t))
        recorder.add(lr, driver.params_numpy(), {})
    recorder.trajectory().save(job["trajectory"], compress=False)


if __name__ == "__main__":
    framework, job_file = sys.argv[1:]
    run(framework, json.loads(Path(job_file).read_text()))
