"""``uo.from_native`` never reads a wrong schedule silently: each case that a script's
optimizer used to be read wrong in, with no error, is refused now, and its remedy reads
it right, with numbers.

* **A hand-set lr** (a loop writing ``param_group['lr'] = get_lr(it)`` before each step,
  nanoGPT's shape): read without a schedule it is refused (it used to be read as the
  constant lr of the moment); ``lr_scheduler=uo.schedules.WarmupCosineToMin(...)`` is the
  remedy, checked against the live lr at the optimizer's step count.
* **Two schedulers on one optimizer** (a StepLR and a LinearLR): passing one of them is
  refused (the live lr 0.044 is not the StepLR's 0.05); the list is read as torch's
  ``ChainedScheduler`` composes them (it used to be a TypeError).
* **Rules read from a torch model, built on a MindSpore model**: a rule of exact names
  that matches only some of them (``emb.weight`` is MindSpore's ``emb.embedding_table``,
  ``ln.weight`` its ``ln.gamma``) is refused at ``uo.build`` (it used to decay the
  Embedding and the LayerNorm); ``uo.porting.map_rules`` renames the rules onto the
  model.

The torch run (this process) saves its state after 4 of 8 steps with the remedy
(``uo.save_state``); ``uo.resume`` continues it in Paddle and in MindSpore
(``from_native_worker.py``, a process each), and the stitched runs follow the float64
oracle of the spec read within the conformance rule, lr included, as the uninterrupted
torch run does. A control shows the oracle tells the wrong reading apart.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require
from support import Replay, installed_frameworks, judge

import unified_opt as uo
from unified_opt.conformance.trajectory import Trajectory

WORKER = Path(__file__).parent / "from_native_worker.py"
TARGETS = [f for f in ("paddle", "mindspore") if f in installed_frameworks()]
STEPS, SWITCH = 8, 4
SHAPES = {"emb.weight": (5, 3), "ln.weight": (3,), "ln.bias": (3,), "fc.weight": (2, 3),
          "fc.bias": (2,)}
#: the script's hand-written warm-up + cosine (nanoGPT's get_lr, in this test's words)
PEAK, FLOOR, WARMUP, DECAY = 6e-3, 6e-4, 3, 10


def get_lr(it: int) -> float:
    if it < WARMUP:
        return PEAK * (it + 1) / (WARMUP + 1)
    if it > DECAY:
        return FLOOR
    ratio = (it - WARMUP) / (DECAY - WARMUP)
    return FLOOR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (PEAK - FLOOR)


SCHEDULE = uo.schedules.WarmupCosineToMin(lr=PEAK, min_lr=FLOOR, warmup_steps=WARMUP,
                                          decay_steps=DECAY)


def _arrays(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s).astype(np.float32) for n, s in SHAPES.items()}


INITIAL = _arrays(0)
GRADS = tuple(_arrays(100 + t) for t in range(STEPS))


def _torch_net():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)
            self.ln = torch.nn.LayerNorm(3)
            self.fc = torch.nn.Linear(3, 2)

    net = Net()
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(torch.from_numpy(INITIAL[name]))
    return net


def _values(net) -> dict:
    return {n: p.detach().numpy().copy() for n, p in net.named_parameters()}


def _step(net, optimizer, t: int) -> None:
    import torch

    for name, p in net.named_parameters():
        p.grad = torch.from_numpy(GRADS[t][name])
    optimizer.step()


class TorchRun:
    """A torch run of ``STEPS`` steps: its lrs and parameters per step, and what the
    test read and saved at ``SWITCH``."""

    def __init__(self):
        self.lrs: list[float] = []
        self.params: list[dict] = []
        self.spec = self.groups = self.state = None

    def record(self, optimizer, net, t):
        self.lrs.append(float(optimizer.param_groups[0]["lr"]))
        _step(net, optimizer, t)
        self.params.append(_values(net))

    def trajectory(self, tail: dict | None = None) -> Trajectory:
        """The run's trajectory; ``tail``: a worker's steps ``SWITCH..`` in its place."""
        lrs, params = list(self.lrs), list(self.params)
        if tail is not None:
            for t in range(SWITCH, STEPS):
                lrs[t] = float(tail[f"lr/{t}"])
                params[t] = {n: tail[f"{t}/{n}"] for n in SHAPES}
        return Trajectory(np.array(lrs), {n: np.stack([p[n] for p in params])
                                          for n in SHAPES}, {})

    def replay(self, spec=None, groups=None) -> Replay:
        return Replay(self.spec if spec is None else spec, INITIAL, GRADS,
                      tuple(self.groups if groups is None else groups))


def _hand_set_run(directory: Path) -> TorchRun:
    """minGPT's decay sets by module type (Linear weights decay; biases, LayerNorm and
    Embedding weights do not) and nanoGPT's hand-set warm-up + cosine."""
    import torch

    net = _torch_net()
    no_decay = [net.emb.weight, net.ln.weight, net.ln.bias, net.fc.bias]
    optimizer = torch.optim.AdamW([{"params": [net.fc.weight], "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=PEAK, betas=(0.9, 0.95))
    run = TorchRun()
    for t in range(STEPS):
        for group in optimizer.param_groups:       # the script's loop, before each step
            group["lr"] = get_lr(t)
        if t == SWITCH:
            with pytest.raises(ValueError, match=r"no param group runs at the constructor's "
                                                 r"lr 0.006 .*lr_scheduler=uo.schedules"):
                uo.from_native(optimizer, names=net)
            with pytest.raises(ValueError, match="no param group runs at the constructor"):
                uo.save_state(optimizer, directory / "refused.safetensors", names=net)
            run.spec, run.groups = uo.from_native(optimizer, lr_scheduler=SCHEDULE, names=net)
            run.state = directory / "hand_set.safetensors"
            uo.save_state(optimizer, run.state, lr_scheduler=SCHEDULE, names=net)
        run.record(optimizer, net, t)
    return run


def _chained_run(directory: Path) -> TorchRun:
    import torch

    net = _torch_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    step_lr = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    linear = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.4, total_iters=5)
    run = TorchRun()
    for t in range(STEPS):
        if t == SWITCH:
            with pytest.raises(ValueError, match=r"param_groups\[0\] runs its next step "
                                                 r"\(step 4\) at lr 0.04.*StepLR read gives "
                                                 r"it 0.05 there.*lr_scheduler=\[s1, s2\]"):
                uo.from_native(optimizer, step_lr)
            run.spec, run.groups = uo.from_native(optimizer, [step_lr, linear])
            run.state = directory / "chained.safetensors"
            uo.save_state(optimizer, run.state, lr_scheduler=[step_lr, linear], names=net)
        run.record(optimizer, net, t)
        step_lr.step()
        linear.step()
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two torch runs, and each continued in every target framework."""
    pytest.importorskip("torch")
    directory = tmp_path_factory.mktemp("from_native")
    torch_runs = {"hand_set": _hand_set_run(directory), "chained": _chained_run(directory)}
    for label, run in torch_runs.items():
        np.savez(directory / f"{label}.params.npz", **run.params[SWITCH - 1])
    np.savez(directory / "grads.npz", **{f"{t}/{n}": g for t, grads in enumerate(GRADS)
                                         for n, g in grads.items()})
    hand = torch_runs["hand_set"]
    rules = {"spec": hand.spec.to_dict(), "groups": [g.to_dict() for g in hand.groups]}
    processes = {}
    for framework in TARGETS:
        jobs = [{"state": str(run.state), "params": str(directory / f"{label}.params.npz"),
                 "grads": str(directory / "grads.npz"), "first": SWITCH, "steps": STEPS,
                 "out": str(directory / f"{label}__{framework}.npz"),
                 **({"rules": rules} if label == "hand_set" else {})}
                for label, run in torch_runs.items()]
        job_file = directory / f"{framework}.json"
        job_file.write_text(json.dumps(jobs))
        processes[framework] = subprocess.Popen(
            [sys.executable, str(WORKER), framework, str(job_file)], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
    for framework, process in processes.items():
        out, _ = process.communicate(timeout=600)
        assert process.returncode == 0, f"{framework} worker failed:\n{out[-4000:]}"
    return directory, torch_runs


def _tail(directory: Path, label: str, framework: str) -> dict:
    with np.load(directory / f"{label}__{framework}.npz", allow_pickle=False) as saved:
        return {k: saved[k] for k in saved.files}


@require("torch")
def test_a_hand_set_lr_is_read_with_its_schedule_and_continues_elsewhere(runs):
    directory, torch_runs = runs
    run = torch_runs["hand_set"]
    assert run.spec == uo.preset("torch.optim.AdamW", lr=PEAK, betas=(0.9, 0.95),
                                 weight_decay=0.1).replace(lr=SCHEDULE)
    assert run.groups == [uo.Group(match=("emb.weight", "ln.weight", "ln.bias", "fc.bias"),
                                   weight_decay=0.0)]
    assert [SCHEDULE(t) for t in range(STEPS)] == run.lrs == [get_lr(t) for t in range(STEPS)]
    result = judge(run.trajectory(), run.replay(), state=False)
    assert result.passed, result.detail
    # the control: read as the constant lr of the moment (as before), the run is off
    constant = run.spec.replace(lr=get_lr(SWITCH))
    assert not judge(run.trajectory(), run.replay(constant), state=False, lr=False).passed
    for framework in TARGETS:
        result = judge(run.trajectory(_tail(directory, "hand_set", framework)), run.replay(),
                       state=False)
        assert result.passed, f"torch -> {framework}: {result.detail}"


@require("torch")
def test_a_list_of_schedulers_reads_as_their_chain_and_continues_elsewhere(runs):
    directory, torch_runs = runs
    run = torch_runs["chained"]
    chain = uo.schedules.preset("torch.optim.lr_scheduler.ChainedScheduler", base_lr=0.1,
                                schedulers=[("StepLR", {"step_size": 3, "gamma": 0.5}),
                                            ("LinearLR", {"start_factor": 0.4,
                                                          "total_iters": 5})])
    assert run.spec == uo.preset("torch.optim.SGD", lr=0.1, momentum=0.9).replace(lr=chain)
    assert run.groups == []
    assert run.lrs == pytest.approx([chain(t) for t in range(STEPS)], rel=1e-14)
    assert run.lrs[0] == pytest.approx(0.04)
    assert judge(run.trajectory(), run.replay(), state=False).passed
    # the control: the StepLR alone, which from_native used to accept
    step_only = run.spec.replace(lr=uo.schedules.preset(
        "torch.optim.lr_scheduler.StepLR", base_lr=0.1, step_size=3, gamma=0.5))
    assert not judge(run.trajectory(), run.replay(step_only), state=False, lr=False).passed
    for framework in TARGETS:
        result = judge(run.trajectory(_tail(directory, "chained", framework)), run.replay(),
                       state=False)
        assert result.passed, f"torch -> {framework}: {result.detail}"


@require("torch")
def test_torch_rules_on_a_mindspore_model_are_refused_and_mapped(runs):
    if "mindspore" not in TARGETS:
        pytest.skip("needs MindSpore")
    directory, _ = runs
    said = json.loads((directory / "hand_set__mindspore.json").read_text())
    assert "names exact parameters, and ['emb.weight', 'ln.weight', 'ln.bias'] name none" \
        in said["unmapped"] and "uo.porting.map_rules" in said["unmapped"]
    assert said["mapped"] == [uo.Group(match=("emb.embedding_table", "fc.bias", "ln.beta",
                                              "ln.gamma"), weight_decay=0.0).to_dict()]
    if "paddle" in TARGETS:     # Paddle names these parameters as torch does
        said = json.loads((directory / "hand_set__paddle.json").read_text())
        assert said["unmapped"] == "built"
        assert said["mapped"] == [g.to_dict() for g in _torch_rules()]


def _torch_rules():
    return [uo.Group(match=("emb.weight", "fc.bias", "ln.bias", "ln.weight"),
                     weight_decay=0.0)]


@require("torch")
def test_a_chained_scheduler_object_and_a_uo_scheduler_are_read():
    import torch

    def stepped(make, klass=torch.optim.SGD):
        net = _torch_net()
        optimizer = klass(net.parameters(), lr=0.1)
        scheduler = make(optimizer)
        for t in range(5):
            _step(net, optimizer, t)
            if scheduler is not None:
                scheduler.step()
        return optimizer, scheduler

    S = torch.optim.lr_scheduler
    optimizer, chained = stepped(lambda o: S.ChainedScheduler(
        [S.StepLR(o, step_size=3, gamma=0.5), S.LinearLR(o, start_factor=0.4,
                                                          total_iters=5)]))
    spec, _ = uo.from_native(optimizer, chained)
    assert spec.lr(5) == pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-14)
    optimizer, own = stepped(lambda o: uo.lr_scheduler.CosineAnnealingLR(o, T_max=8))
    spec, _ = uo.from_native(optimizer, own)
    assert spec.lr == uo.schedules.Cosine(lr=0.1, T_max=8)
    assert uo.porting.live.read_native(optimizer, own).position == 5
    # a schedule one step ahead of the live lr (a loop read before it wrote the next
    # step's lr): refused, saying so; Adam counts its steps (the position, 5)
    optimizer, _ = stepped(lambda o: None, torch.optim.Adam)
    behind = uo.schedules.Piecewise(boundaries=[1, 2, 3, 4, 5],
                                    values=[0.1, 0.1, 0.1, 0.1, 0.1, 0.05])
    with pytest.raises(ValueError, match=r"\(step 5\) at lr 0.1, but uo.schedules.Piecewise "
                                         r"read gives it 0.05 there.*the live lr is the "
                                         r"schedule's at step 4"):
        uo.from_native(optimizer, behind)
    spec, _ = uo.from_native(optimizer, uo.schedules.Piecewise(boundaries=[5], values=[0.2, 0.1]))
    assert spec.lr(5) == 0.1


@require("torch")
def test_schedule_refusals_name_the_argument():
    import torch

    net = _torch_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="lr_scheduler is an empty list"):
        uo.from_native(optimizer, [])
    with pytest.raises(TypeError, match=r"lr_scheduler\[1\] must be a "
                                        "torch.optim.lr_scheduler scheduler"):
        uo.from_native(optimizer, [torch.optim.lr_scheduler.StepLR(optimizer, 2), "StepLR"])
    # SGD keeps no step count: a schedule's position cannot be read
    _step(net, optimizer, 0)
    with pytest.raises(ValueError, match="SGD keeps no step count"):
        uo.from_native(optimizer, SCHEDULE)
    other = torch.optim.SGD(_torch_net().parameters(), lr=0.1)
    a = torch.optim.lr_scheduler.StepLR(optimizer, 2)
    b = torch.optim.lr_scheduler.StepLR(other, 2)
    with pytest.raises(ValueError, match=r"lr_scheduler\[1\]=.* schedules another optimizer"):
        uo.from_native(optimizer, [a, b])
    a.step()
    c = torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.9)
    with pytest.raises(ValueError, match=r"stand at different steps \(last_epoch \[1, 0\]\)"):
        uo.from_native(optimizer, [a, c])


def test_an_exact_name_rule_must_find_every_name():
    from unified_opt.groups import exact_name, plan_parameters

    names = ["emb.embedding_table", "ln.gamma", "ln.beta", "fc.weight", "fc.bias"]
    torch_named = uo.Group(match=("emb.weight", "ln.weight", "fc.bias"), weight_decay=0.0)
    with pytest.raises(ValueError, match=r"groups\[0\] .* names exact parameters, and "
                                         r"\['emb.weight', 'ln.weight'\] name none here.*"
                                         r"uo.porting.map_rules"):
        plan_parameters(uo.AdamW(weight_decay=0.1), names, [torch_named])
    spec = uo.AdamW(weight_decay=0.1, no_decay_names=("ln.weight", "fc.bias"))
    with pytest.raises(ValueError, match=r"no_decay_names=\('ln.weight', 'fc.bias'\) names "
                                         r"exact parameters, and \['ln.weight'\] name none"):
        plan_parameters(spec, names, None)
    # a pattern among the names makes it a pattern rule: matching some is enough
    plans = plan_parameters(uo.AdamW(weight_decay=0.1), names,
                            [uo.Group(match=("ln.weight", "*bias"), weight_decay=0.0)])
    assert [p.group for p in plans] == [None, None, None, None, 0]
    # a name's own wildcard characters, escaped as from_native writes them, are exact
    assert exact_name("h[*]x[?]y[[]") == "h*x?y[" and exact_name("h*") is None
    with pytest.raises(ValueError, match=r"\['a\*b'\] name none"):
        plan_parameters(uo.AdamW(), ["ab", "c"], [uo.Group(match=("c", "a[*]b"),
                                                           lr_scale=0.5)])


@require("torch")
def test_a_schedule_given_for_several_groups_reads_their_ratio_and_says_so():
    import torch

    net = _torch_net()
    optimizer = torch.optim.AdamW([{"params": [net.fc.weight]},
                                   {"params": [net.fc.bias, net.emb.weight]}], lr=PEAK)
    for t in range(2):
        optimizer.param_groups[0]["lr"] = get_lr(t)
        optimizer.param_groups[1]["lr"] = 0.5 * get_lr(t)
        _step(net, optimizer, t)
    with pytest.raises(ValueError, match="no param group runs at the constructor's lr"):
        uo.from_native(optimizer, names=net)
    optimizer.param_groups[0]["lr"] = get_lr(2)
    optimizer.param_groups[1]["lr"] = 0.5 * get_lr(2)
    reading = uo.porting.live.read_native(optimizer, SCHEDULE, names=net)
    assert reading.spec.lr == SCHEDULE and reading.position == 2
    assert reading.groups == [uo.Group(match=("fc.bias", "emb.weight"), lr_scale=0.5)]
    assert "read as constant factors" in reading.notes[0]
    # the factor is the moment's (what the note says): the object shows no other
    optimizer.param_groups[1]["lr"] = 0.4 * get_lr(2)
    reading = uo.porting.live.read_native(optimizer, SCHEDULE, names=net)
    assert reading.groups[0].lr_scale == pytest.approx(0.4)
