"""The same training loop in PyTorch, PaddlePaddle and MindSpore, with one optimizer
spec: AdamW with a cosine schedule and no decay on the biases. Each framework runs in a
process of its own (importing Paddle before MindSpore breaks MindSpore); the model
starts from the same weights and sees the same data, so the three loss curves agree to
float32 rounding.

    python examples/training_loop.py                 # every installed framework
    python examples/training_loop.py --framework paddle --steps 20
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

import unified_opt as uo

STEPS = 100
SPEC = uo.AdamW(lr=uo.schedules.Cosine(lr=3e-3, T_max=STEPS), weight_decay=0.05)
GROUPS = [uo.Group(match="*bias", weight_decay=0.0)]


def data_and_weights() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The data and the initial weights, in torch's (out, in) layout."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    weights = {"0.weight": rng.standard_normal((32, 8)) / np.sqrt(8),
               "0.bias": np.zeros(32), "2.weight": rng.standard_normal((1, 32)) / np.sqrt(32),
               "2.bias": np.zeros(1)}
    return {"x": x, "y": y}, {k: v.astype(np.float32) for k, v in weights.items()}


def train_torch(steps: int) -> tuple[list[float], str]:
    import torch

    data, weights = data_and_weights()
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    optimizer = uo.build(SPEC, model, groups=GROUPS)     # torch.optim.AdamW, two groups
    scheduler = uo.native_scheduler(optimizer)               # the cosine, as a LambdaLR
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses, built(optimizer)


def train_paddle(steps: int) -> tuple[list[float], str]:
    import paddle

    data, weights = data_and_weights()
    x, y = paddle.to_tensor(data["x"]), paddle.to_tensor(data["y"])
    model = paddle.nn.Sequential(paddle.nn.Linear(8, 32), paddle.nn.Tanh(),
                                 paddle.nn.Linear(32, 1))
    for name, p in model.named_parameters():       # Paddle's Linear weight is (in, out)
        p.set_value(weights[name].T if name.endswith("weight") else weights[name])
    optimizer = uo.build(SPEC, model, groups=GROUPS)     # paddle.optimizer.AdamW
    scheduler = uo.native_scheduler(optimizer)
    losses = []
    for _ in range(steps):
        loss = paddle.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        scheduler.step()
        losses.append(float(loss))
    return losses, built(optimizer)


def train_mindspore(steps: int) -> tuple[list[float], str]:
    import mindspore as ms

    data, weights = data_and_weights()
    x, y = ms.Tensor(data["x"]), ms.Tensor(data["y"])
    model = ms.nn.SequentialCell([ms.nn.Dense(8, 32), ms.nn.Tanh(), ms.nn.Dense(32, 1)])
    for p in model.trainable_params():             # nn.Dense's weight is (out, in)
        p.set_data(ms.Tensor(weights[p.name]))
    optimizer = uo.build(SPEC, model, groups=GROUPS)     # steps its lr itself

    def forward(inputs, targets):
        return ms.nn.MSELoss()(model(inputs), targets)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    losses = []
    for _ in range(steps):
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        losses.append(float(loss.asnumpy()))
    return losses, built(optimizer)


def built(optimizer) -> str:
    """What uo.build made (uo.explain of the optimizer: the decision of its build)."""
    decision = uo.explain(optimizer)
    return decision.native or f"own implementation ({type(optimizer).__name__})"


TRAIN = {"torch": train_torch, "paddle": train_paddle, "mindspore": train_mindspore}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(TRAIN))
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args(argv)
    if args.framework:                             # one framework: print its losses
        losses, what = TRAIN[args.framework](args.steps)
        print(json.dumps({"losses": losses, "built": what}))
        return 0
    curves = {}
    for framework in uo.backends():                # each in a process of its own
        done = subprocess.run([sys.executable, __file__, "--framework", framework,
                               "--steps", str(args.steps)], capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return 1
        curves[framework] = json.loads(done.stdout.strip().splitlines()[-1])
    for framework, run in curves.items():
        losses = run["losses"]
        print(f"{framework:>9}: {run['built']}: loss {losses[0]:.5f} -> {losses[-1]:.5f}")
    reference = np.array(next(iter(curves.values()))["losses"])
    spread = max(float(np.max(np.abs(np.array(c["losses"]) / reference - 1)))
                 for c in curves.values())
    print(f"largest relative difference between the frameworks' losses: {spread:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
