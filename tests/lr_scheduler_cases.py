"""The runs ``test_lr_scheduler_frameworks.py`` makes on Paddle and MindSpore (and its
worker, ``lr_scheduler_worker.py``): a spec, the uo scheduler built on the optimizer,
and the ``uo.schedules`` preset each group's lr must follow, read independently of the
scheduler classes. Two parameter groups with different lrs; seeded float32 values.
"""

import numpy as np

import unified_opt as uo

STEPS = 20
#: the groups' lrs on the own path (a group per parameter); the native classes run one
#: lr for every group (MindSpore's one lr Parameter, Paddle's one lr times fixed group
#: factors), so a scheduler drives them with one group holding both parameters
GROUP_LRS = (0.1, 0.05)
ONE_GROUP = (0.1,)
SHAPES = ((3, 4), (5,))
TORCH = "torch.optim.lr_scheduler"


def group_lrs(framework, path):
    return ONE_GROUP if path == "native" else GROUP_LRS


def initial():
    return [np.linspace(-1.0, 1.0, int(np.prod(s)), dtype=np.float32).reshape(s)
            for s in SHAPES]


def gradient(t, i):
    size = int(np.prod(SHAPES[i]))
    return np.sin(0.7 * np.arange(size) + 1.3 * t + i).astype(np.float32).reshape(SHAPES[i])


def _sequential(L, opt):
    warm = L.LinearLR(opt, start_factor=0.2, total_iters=5)
    cosine = L.CosineAnnealingLR(opt, T_max=15, eta_min=0.001)
    return L.SequentialLR(opt, [warm, cosine], milestones=[5])


def _sequential_preset(lr, g):
    return uo.schedules.preset(f"{TORCH}.SequentialLR", base_lr=lr, schedulers=[
        ("LinearLR", {"start_factor": 0.2, "total_iters": 5}),
        ("CosineAnnealingLR", {"T_max": 15, "eta_min": 0.001})], milestones=[5])


class _Both:
    def __init__(self, *schedulers):
        self.schedulers = schedulers

    def step(self):
        for s in self.schedulers:
            s.step()


def _two(L, opt):
    return _Both(L.StepLR(opt, step_size=4, gamma=0.5), L.ExponentialLR(opt, gamma=0.95))


def _two_preset(lr, g):
    return uo.schedules.preset(f"{TORCH}.ChainedScheduler", base_lr=lr, schedulers=[
        ("StepLR", {"step_size": 4, "gamma": 0.5}), ("ExponentialLR", {"gamma": 0.95})])


def _one_cycle(L, opt):
    return L.OneCycleLR(opt, max_lr=[0.05, 0.02], total_steps=STEPS)


def _one_cycle_preset(lr, g):
    return uo.schedules.preset(f"{TORCH}.OneCycleLR", max_lr=(0.05, 0.02)[g],
                               total_steps=STEPS)


#: case -> (spec, make the scheduler from (uo.lr_scheduler, optimizer), (group lr, group
#: index) -> preset,
#: the paths it runs on)
CASES = {
    "sgd-sequential": (uo.SGD(lr=0.1, momentum=0.9), _sequential, _sequential_preset,
                       ("native", "own")),
    "sgd-two-schedulers": (uo.SGD(lr=0.1, momentum=0.9, nesterov=True), _two, _two_preset,
                           ("native", "own")),
    # betas cycle: the own path reads them from the groups at every step
    "adamw-one-cycle": (uo.AdamW(lr=0.01, weight_decay=0.01), _one_cycle, _one_cycle_preset,
                        ("own",)),
}
