"""The porting walkthrough of docs/porting.md, measured: a torch run of the sample's model
and optimizer (``train_torch.py``: AdamW + CosineAnnealingLR) trains 100 of its 200 steps,
saves its optimizer with ``uo.save_state``, and continues in Paddle and in MindSpore
through ``uo.resume``; a control continues in Paddle with the optimizer restarted (what a
port without the state does). Each framework runs in a process of its own.

    python examples/port/walkthrough.py --out DIR  # writes DIR/porting_curves.{json,png}
    python examples/port/walkthrough.py --out docs # the committed docs/porting_curves.*
    python examples/port/walkthrough.py --check    # exit 1 if the committed JSON is stale
                                                   # (any loss off by more than 1e-5)

The JSON holds every loss; the PNG (matplotlib, ``pip install -e .[docs]``) is drawn from
it and carries the JSON's sha256 in its metadata, so a test can tell that both are
current. Without matplotlib the JSON is written and the PNG is not, which the run says.
"""

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from unified_opt.files import write_text

ROOT = Path(__file__).resolve().parents[2]
CURVES = ROOT / "docs" / "porting_curves.json"
PLOT = ROOT / "docs" / "porting_curves.png"
STEPS, SWITCH = 200, 100
#: torch's Linear weight is (out, in), Paddle's (in, out): the weights and their state
TRANSPOSED = ("0.weight", "2.weight")


# -- each framework's half (run as: walkthrough.py --half FRAMEWORK DIR [fresh]) ----------

def torch_half(directory: Path) -> list[float]:
    import torch
    from torch import nn

    import unified_opt as uo

    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99),
                                  weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS)
    losses = []
    for step in range(STEPS):
        if step == SWITCH:     # the checkpoint: data, weights, optimizer state
            np.savez(directory / "data.npz", x=x.numpy(), y=y.numpy())
            np.savez(directory / "weights.npz",
                     **{n: p.detach().numpy() for n, p in model.named_parameters()})
            uo.save_state(optimizer, directory / "run.safetensors", lr_scheduler=scheduler,
                          names=model)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def paddle_half(directory: Path, fresh: bool) -> list[float]:
    import paddle

    import unified_opt as uo
    from unified_opt.porting.state import read_state

    data, weights = np.load(directory / "data.npz"), np.load(directory / "weights.npz")
    x, y = paddle.to_tensor(data["x"]), paddle.to_tensor(data["y"])
    model = paddle.nn.Sequential(paddle.nn.Linear(8, 32), paddle.nn.Tanh(),
                                 paddle.nn.Linear(32, 1))
    for name, p in model.named_parameters():
        p.set_value(weights[name].T if name in TRANSPOSED else weights[name])
    state = directory / "run.safetensors"
    if fresh:   # the port without the state: the optimizer and its schedule restart
        optimizer = uo.build(read_state(state).spec, model)
    else:
        optimizer = uo.resume(state, model, transform={n: np.transpose for n in TRANSPOSED})
    scheduler = uo.native_scheduler(optimizer)
    losses = []
    for _ in range(SWITCH, STEPS):
        loss = paddle.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        scheduler.step()
        losses.append(float(loss))
    return losses


def mindspore_half(directory: Path) -> list[float]:
    import mindspore as ms
    from mindspore import nn

    import unified_opt as uo

    data, weights = np.load(directory / "data.npz"), np.load(directory / "weights.npz")
    x, y = ms.Tensor(data["x"]), ms.Tensor(data["y"])
    model = nn.SequentialCell([nn.Dense(8, 32), nn.Tanh(), nn.Dense(32, 1)])
    for p in model.trainable_params():      # nn.Dense's weight is (out, in), as torch's
        p.set_data(ms.Tensor(weights[p.name]))
    optimizer = uo.resume(directory / "run.safetensors", model)

    def forward(inputs, targets):
        return nn.MSELoss()(model(inputs), targets)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    losses = []
    for _ in range(SWITCH, STEPS):
        loss, grads = grad_fn(x, y)
        optimizer(grads)               # MindSpore's optimizers step their lr themselves
        losses.append(float(loss.asnumpy()))
    return losses


# -- the walkthrough ----------------------------------------------------------------------

def _half(framework: str, directory: Path, fresh: bool = False) -> list[float]:
    out = directory / f"{framework}{'-fresh' if fresh else ''}.json"
    command = [sys.executable, __file__, "--half", framework, str(directory)]
    done = subprocess.run(command + (["fresh"] if fresh else []), capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{framework} half failed:\n{done.stdout}{done.stderr}")
    return json.loads(out.read_text())


def curves() -> dict:
    """Every loss of the four runs (losses rounded to 7 significant digits)."""
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        torch_losses = _half("torch", directory)
        runs = {"torch, uninterrupted": torch_losses,
                "torch -> Paddle (uo.resume)": _half("paddle", directory),
                "torch -> MindSpore (uo.resume)": _half("mindspore", directory),
                "torch -> Paddle, optimizer restarted": _half("paddle", directory, True)}
    rounded = {k: [float(f"{v:.7g}") for v in losses] for k, losses in runs.items()}
    return {"steps": STEPS, "switch": SWITCH, "losses": rounded}


def stale(committed: dict, measured: dict, rtol: float = 1e-5) -> list[str]:
    """The runs whose committed losses differ from the measured ones by more than
    ``rtol`` (relative; float32 sums may round differently on another CPU)."""
    if committed.keys() != measured.keys() or committed["losses"].keys() != \
            measured["losses"].keys():
        return ["the runs differ"]
    return [name for name, losses in measured["losses"].items()
            if not np.allclose(committed["losses"][name], losses, rtol=rtol, atol=0)]


def _text(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (whole, near) = plt.subplots(1, 2, figsize=(11, 4))
    switch = data["switch"]
    for name, losses in data["losses"].items():
        start = 0 if len(losses) == data["steps"] else switch
        steps = np.arange(start, start + len(losses)) + 1
        style = "--" if "restarted" in name else "-"
        for axis in (whole, near):
            axis.plot(steps, losses, style, label=name, linewidth=1.2)
    for axis in (whole, near):
        axis.axvline(switch + 0.5, color="grey", linewidth=0.8)
        axis.set_xlabel("step")
    whole.set_ylabel("training loss (MSE)")
    whole.set_title("the run, ported at step 100")
    near.set_xlim(switch - 5, switch + 40)
    window = [v for losses in data["losses"].values() for v in
              (losses[switch - 5:switch + 40] if len(losses) == data["steps"] else
               losses[:40])]
    near.set_ylim(min(window) - 0.005, max(window) + 0.005)
    near.set_title("around the switch")
    near.legend(fontsize=8)
    fig.tight_layout()
    digest = hashlib.sha256(_text(data).encode()).hexdigest()
    fig.savefig(path, dpi=90, metadata={"Description": f"porting_curves.json sha256 {digest}"})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed JSON")
    parser.add_argument("--out", metavar="DIR", type=Path,
                        help="the folder to write porting_curves.json and .png into")
    parser.add_argument("--half", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.half and not args.check and args.out is None:
        parser.error("give --out DIR (the folder to write the curves into) or --check")
    if args.half:
        framework, directory, *fresh = args.half
        directory = Path(directory)
        losses = {"torch": lambda: torch_half(directory),
                  "paddle": lambda: paddle_half(directory, bool(fresh)),
                  "mindspore": lambda: mindspore_half(directory)}[framework]()
        name = f"{framework}{'-fresh' if fresh else ''}.json"
        (directory / name).write_text(json.dumps(losses))
        return 0
    data = curves()
    if args.check:
        return 0 if stale(json.loads(CURVES.read_text()), data) == [] else 1
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / CURVES.name, _text(data))
    print(f"wrote {args.out / CURVES.name}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"{args.out / PLOT.name} not drawn: matplotlib is not installed "
              "(pip install -e '.[docs]')", file=sys.stderr)
        return 0
    plot(data, args.out / PLOT.name)
    print(f"wrote {args.out / PLOT.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
