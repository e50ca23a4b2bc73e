"""One framework's side of ``test_state_lrs.py``, run in a process of its own (one framework
per process): ``python state_lrs_worker.py FRAMEWORK OUT``.

``FRAMEWORK`` is ``torch``, ``paddle`` or ``mindspore``. For each way of saving (``dict``:
``opt.state_dict()``; ``file``: ``uo.save_state`` / ``uo.load_state``; ``resume``:
``uo.save_state`` / ``uo.resume``) and each path (own, native; on MindSpore the native
path is ``experimental.optim.AdamW``), a run of :data:`STEPS` steps driven by
``uo.lr_scheduler.StepLR`` is interrupted after :data:`SAVED_AT` steps: its optimizer and
scheduler state are taken, fresh objects are built (the model, the optimizer, the
scheduler; the model's weights as saved), both states loaded, and the run goes on
(after ``uo.resume`` the scheduler is made with ``last_epoch=SAVED_AT - 1``, torch's
form for an optimizer whose groups hold their ``initial_lr`` already). A hand loop writing
``param_groups[0]["lr"]`` is interrupted the same way, so is a ``uo.lr_scheduler.OneCycleLR``
run (its ``max_lr`` and ``min_lr`` kept in the groups), one with OneCycleLR's default
``cycle_momentum=True`` (``OneCycleLR-momentum``: it writes ``betas`` into the groups at
every step; own path everywhere, torch's native class, and MindSpore's
``experimental.optim.AdamW``, which reads its groups' betas at every call as torch
does), and on torch also torch's own
``StepLR`` on a torch native class. Written to ``OUT/FRAMEWORK.npz``: per case, the
parameters and each step's lr (and, with momentum cycling, each step's ``betas``) of the
uninterrupted and of the resumed run (``<case>/whole/...``, ``<case>/resumed/...``).

On Paddle also ``OUT/paddle_refusal.json``: a Paddle own run with momentum cycling,
saved with ``state_dict()``, loaded into the native class (which reads its betas when
built): the refusal's message, and whether the target was left as it was.

``torch-across OUT`` writes the torch side of the cross-framework case: a run saved with
its ``StepLR`` at :data:`SAVED_AT` steps (``OUT/across.safetensors`` and the scheduler's
state as JSON, ``OUT/across_scheduler.json``) and the lrs of its later steps
(``OUT/across_torch.json``); ``paddle-across OUT`` / ``mindspore-across OUT`` resume it
with ``uo.resume`` (own and native path) + ``uo.lr_scheduler.StepLR`` and write the
lrs they step with (``OUT/across_<framework>.json``: path -> lrs).
"""

import json
import sys
from pathlib import Path

import numpy as np

import unified_opt as uo

STEPS, SAVED_AT = 7, 3
SPEC = uo.AdamW(lr=0.1, weight_decay=0.01)
SHAPES = {"w": (3, 2), "b": (2,)}


def initial(name: str) -> np.ndarray:
    rng = np.random.default_rng(sorted(SHAPES).index(name))
    return rng.standard_normal(SHAPES[name]).astype(np.float32)


def gradient(t: int, name: str) -> np.ndarray:
    rng = np.random.default_rng(100 + 7 * t + sorted(SHAPES).index(name))
    return rng.standard_normal(SHAPES[name]).astype(np.float32)


class Framework:
    """Parameters, a step and an lr read, on one framework."""

    def __init__(self, name: str):
        self.name = name

    def params(self, values: dict | None = None) -> list:
        """Fresh parameters holding ``values`` (name -> array; default :func:`initial`)."""
        start = values if values is not None else {n: initial(n) for n in SHAPES}
        if self.name == "torch":
            import torch

            return [(n, torch.nn.Parameter(torch.from_numpy(start[n].copy()))) for n in SHAPES]
        if self.name == "paddle":
            import paddle

            out = []
            for n in SHAPES:
                p = paddle.create_parameter(list(SHAPES[n]), "float32")
                p.set_value(start[n])
                out.append((n, p))
            return out
        import mindspore as ms

        return [(n, ms.Parameter(ms.Tensor(start[n].copy()), name=n)) for n in SHAPES]

    def step(self, opt, params, t: int) -> None:
        grads = [gradient(t, n) for n, _ in params]
        if self.name == "torch":
            import torch

            for (_, p), g in zip(params, grads):
                p.grad = torch.from_numpy(g)
            opt.step()
        elif self.name == "paddle":
            import paddle

            loss = sum((p * paddle.to_tensor(g)).sum() for (_, p), g in zip(params, grads))
            loss.backward()
            opt.step()
            opt.clear_grad()
        else:
            import mindspore as ms

            opt(tuple(ms.Tensor(g) for g in grads))

    def values(self, params) -> dict:
        return {n: np.array(p.detach().numpy() if self.name == "torch" else
                            p.numpy() if self.name == "paddle" else p.asnumpy())
                for n, p in params}


def lr_now(opt) -> float:
    lr = opt.param_groups[0]["lr"]
    return float(lr.asnumpy()) if hasattr(lr, "asnumpy") else float(lr)


def build(fw: Framework, params, path: str):
    opt = uo.build(SPEC, params, path=path)
    if fw.name == "mindspore" and path == "native":
        assert type(opt).__module__.startswith("mindspore.experimental"), type(opt)
    return opt


def hand_lr(t: int) -> float:
    """The lr a hand-written loop sets before step ``t``."""
    return 0.1 * 0.8 ** t


def scheduler(driver: str, opt, last_epoch: int = -1):
    """The scheduler ``driver`` names over ``opt`` (None: a hand loop)."""
    if driver == "torch-StepLR":
        import torch

        return torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5,
                                               last_epoch=last_epoch)
    if driver == "StepLR":
        return uo.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5, last_epoch=last_epoch)
    if driver == "OneCycleLR":         # keeps max_lr and min_lr in the groups
        return uo.lr_scheduler.OneCycleLR(opt, max_lr=0.3, total_steps=10,
                                          cycle_momentum=False, last_epoch=last_epoch)
    if driver == "OneCycleLR-momentum":    # writes betas into the groups at every step
        return uo.lr_scheduler.OneCycleLR(opt, max_lr=0.3, total_steps=10,
                                          last_epoch=last_epoch)
    return None


def betas_now(opt) -> list[float]:
    return [float(b) for b in opt.param_groups[0]["betas"]]


def run(fw: Framework, path: str, how: str, driver: str, tmp: Path) -> dict:
    """The parameters and lrs of one run, ``how`` = "whole" or a way of saving."""
    params = fw.params()
    opt = build(fw, params, path)
    sched = scheduler(driver, opt)
    lrs, betas = [], []
    for t in range(STEPS):
        if how != "whole" and t == SAVED_AT:
            saved_sched = None if sched is None else json.loads(json.dumps(sched.state_dict()))
            file = tmp / f"{fw.name}_{path}_{how}_{driver}.safetensors"
            if how == "dict":
                saved = opt.state_dict()
            else:
                uo.save_state(opt, file)
            # a fresh process: the model's weights restored, everything else built again
            params = fw.params(fw.values(params))
            if how == "resume":
                opt = uo.resume(file, params, path_taken=path)
            else:
                opt = build(fw, params, path)
            # uo.resume loaded the groups' lr and initial_lr already: torch's way to make
            # a scheduler over a resumed optimizer is last_epoch=<steps - 1>
            sched = scheduler(driver, opt, SAVED_AT - 1 if how == "resume" else -1)
            if how == "dict":
                opt.load_state_dict(saved)
            elif how == "file":
                uo.load_state(opt, file)
            if sched is not None:
                sched.load_state_dict(saved_sched)
        if driver == "hand":
            for group in opt.param_groups:
                group["lr"] = hand_lr(t)
        lrs.append(lr_now(opt))
        betas.append(betas_now(opt))
        fw.step(opt, params, t)
        if sched is not None:
            sched.step()
    cycled = {"betas": np.array(betas)} if driver == "OneCycleLR-momentum" else {}
    return {"lrs": np.array(lrs), **cycled, **fw.values(params)}


def cases(framework: str) -> list[tuple[str, str, str]]:
    out = [(path, how, "StepLR") for path in ("own", "native")
           for how in ("dict", "file", "resume")]
    out += [(path, "dict", "hand") for path in ("own", "native")]
    out += [("own", how, "OneCycleLR") for how in ("dict", "resume")]
    out += [("own", how, "OneCycleLR-momentum") for how in ("dict", "resume")]
    if framework == "torch":
        out += [("native", how, "torch-StepLR") for how in ("dict", "file")]
        out += [("native", how, "OneCycleLR-momentum") for how in ("dict", "resume")]
    if framework == "mindspore":
        out += [("native", "dict", "OneCycleLR-momentum")]
    return out


def paddle_refusal(out: Path) -> None:
    """A run whose groups hold written betas, loaded into Paddle's native class."""
    fw = Framework("paddle")
    params = fw.params()
    opt = build(fw, params, "own")
    sched = scheduler("OneCycleLR-momentum", opt)
    for t in range(SAVED_AT):
        fw.step(opt, params, t)
        sched.step()
    saved = opt.state_dict()
    target = build(fw, fw.params(fw.values(params)), "native")
    before = (lr_now(target), betas_now(target), json.dumps(
        {k: str(v) for k, v in target.state_dict()["metadata"].items()}, sort_keys=True))
    try:
        target.load_state_dict(saved)
        message = None
    except ValueError as error:
        message = str(error)
    after = (lr_now(target), betas_now(target), json.dumps(
        {k: str(v) for k, v in target.state_dict()["metadata"].items()}, sort_keys=True))
    (out / "paddle_refusal.json").write_text(json.dumps(
        {"message": message, "unchanged": before == after,
         "saved_betas": json.loads(saved["metadata"]["group_values"])["w"]["betas"]}))


def main(framework: str, out: Path) -> None:
    fw = Framework(framework)
    arrays = {}
    for path, how, driver in cases(framework):
        case = f"{path}/{how}/{driver}"
        for kind in ("whole", how):
            for key, value in run(fw, path, kind, driver, out).items():
                arrays[f"{case}/{'whole' if kind == 'whole' else 'resumed'}/{key}"] = value
    np.savez(out / f"{framework}.npz", **arrays)
    if framework == "paddle":
        paddle_refusal(out)


def across_torch(out: Path) -> None:
    fw = Framework("torch")
    params = fw.params()
    opt = build(fw, params, "own")
    sched = uo.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for t in range(STEPS):
        if t == SAVED_AT:
            uo.save_state(opt, out / "across.safetensors")
            (out / "across_scheduler.json").write_text(json.dumps(sched.state_dict()))
        if t >= SAVED_AT:
            lrs.append(lr_now(opt))
        fw.step(opt, params, t)
        sched.step()
    (out / "across_torch.json").write_text(json.dumps(lrs))


def across_target(framework: str, out: Path) -> None:
    fw = Framework(framework)
    runs = {}
    for path in ("own", "native"):
        params = fw.params()
        opt = uo.resume(out / "across.safetensors", params, path_taken=path)
        sched = uo.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5, last_epoch=SAVED_AT - 1)
        sched.load_state_dict(json.loads((out / "across_scheduler.json").read_text()))
        lrs = []
        for t in range(SAVED_AT, STEPS):
            lrs.append(lr_now(opt))
            fw.step(opt, params, t)
            sched.step()
        runs[path] = lrs
    (out / f"across_{framework}.json").write_text(json.dumps(runs))


if __name__ == "__main__":
    which, folder = sys.argv[1], Path(sys.argv[2])
    if which == "torch-across":
        across_torch(folder)
    elif which.endswith("-across"):
        across_target(which.removesuffix("-across"), folder)
    else:
        main(which, folder)
