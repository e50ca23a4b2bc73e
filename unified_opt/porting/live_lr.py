"""The live lr check of ``uo.from_native``: the lr a live optimizer's group runs at its
next step against the lr the schedule read gives it there, within rounding only (the
tolerances below say which and why). The readers (``unified_opt.backends.<framework>
.reading``) call :func:`check_live_lr` for every group, through
:mod:`unified_opt.porting.live`."""

from __future__ import annotations

from ..schedules import Schedule

CALLER = "from_native"

#: tolerance of :func:`check_live_lr` per step of the position, where the framework
#: computes the lr in float64 (torch, Paddle): their chainable schedulers compute each
#: lr from the one before (StepLR multiplies the group's lr by gamma, CosineAnnealingLR
#: steps its recursive form), so each step rounds once more and the live lr drifts from
#: the closed form: measured at most 3.3e-14 over 5000 steps of every torch scheduler,
#: 3.4e-11 over 100000 steps of a CosineAnnealingLR(T_max=10) (3.4e-16 a step).
#: 1e-12 a step leaves a factor of 3000, and even at 10^5 steps (1e-7) stays within a
#: float32 step's own rounding (1.2e-7): nothing it lets through changes a run.
LR_RTOL_FLOAT64_PER_STEP = 1e-12
#: the same for MindSpore ``experimental`` schedulers, which run torch's recursive forms
#: in float32: measured up to 1.8e-7 a step (3.6e-4 after 2000 steps of a
#: CosineAnnealingLR(T_max=10)); 1e-6 a step leaves a factor of 5
LR_RTOL_FLOAT32_PER_STEP = 1e-6
#: tolerance of a float32 lr computed in closed form at its step (MindSpore's
#: LearningRateSchedule Cells at ``global_step``, a per-step lr list): the float32
#: rounding of the value and of the Cell's own ``exp``/``pow``/``cos``, which near a
#: schedule's end or deep in an exponential decay is large relative to the tiny lr
#: there (100% where float32 underflows) but within a few float32 ulps (1.2e-7) of the
#: schedule's scale, its lr at step 0 (measured up to 2.6e-6 of the lr, less of the
#: scale, over 300 steps of every Cell): 1e-6 of the larger is 8 ulps
LR_RTOL_FLOAT32 = 1e-6


def per_step(rel_tol: float, position: int) -> float:
    """The tolerance of a recursive form at ``position``: ``rel_tol`` for each step."""
    return rel_tol * (1 + position)


#: what a user can do about a live lr that the schedule read does not give
LR_REMEDY = ("pass every scheduler that steps the optimizer (several: lr_scheduler=[s1, "
             "s2], read as torch's ChainedScheduler), or the schedule a loop of the script "
             "follows as a uo.schedules schedule (lr_scheduler=uo.schedules.LinearWarmup("
             "after=uo.schedules.Cosine(...), warmup_steps=...), or WarmupCosineToMin for "
             "nanoGPT's get_lr), or lr_scheduler=None with constant_lr=True to read the "
             "current lr as a constant")


def check_live_lr(where: str, live_lr: float, schedule: Schedule, position: int,
                  scale: float, rel_tol: float, scheduler: str) -> None:
    """ValueError where ``live_lr``, the lr ``where`` (a param group) runs at its next
    step, is not ``scale * schedule(position)``, the lr the spec read gives it there,
    within ``rel_tol`` (rounding only: :data:`LR_RTOL_FLOAT32`, or
    :func:`per_step` of :data:`LR_RTOL_FLOAT64_PER_STEP` or
    :data:`LR_RTOL_FLOAT32_PER_STEP` for recursive forms) of the largest of the two and
    of the schedule's scaled lr at step 0 (its scale: the absolute error a float32 Cell
    makes near a zero lr is a few ulps of it). The message names both values, the
    schedule's step where the live lr is the one before (a loop that sets the lr before
    ``optimizer.step()``, read after the step) and the remedy (:data:`LR_REMEDY`)."""
    live_lr = float(live_lr)
    first = abs(scale * schedule(0))

    def close(expected: float) -> bool:
        return abs(live_lr - expected) <= rel_tol * max(abs(live_lr), abs(expected), first)

    expected = scale * schedule(position)
    if close(expected):
        return
    before = ""
    if position > 0 and close(scale * schedule(position - 1)):
        before = (f" (the live lr is the schedule's at step {position - 1}: a loop that "
                  "writes the lr before optimizer.step() is read once it has written the "
                  "next step's)")
    raise ValueError(f"{CALLER}: {where} runs its next step (step {position}) at lr "
                     f"{live_lr!r}, but {scheduler} read gives it {expected!r} there: the "
                     f"schedule read is not the one the optimizer follows{before}; "
                     f"{LR_REMEDY}")
