"""Runs one port fixture (``tests/port_fixtures/``) for ``test_port_fixtures.py``, one
framework per process: ``python port_fixture_worker.py JOBS.json``.

JOBS.json: a list of jobs, each: ``fixture`` (its stem), ``source`` (the fixture as
written, for torch; as ``unified-opt port`` wrote it, for Paddle and MindSpore),
``framework``, ``mode``
("record": torch float32 on the script's own loss, saving the initial weights and every
step's gradients to ``stream``; "replay": the saved gradients fed to the parameters
instead of a backward pass), ``dtype`` ("float32"/"float64", torch's replay only),
``float32_hyperparameters`` (torch's replay: the betas, eps and weight decay rounded to
float32, as the conformance rule's second float32 reference holds them),
``steps``, ``stream`` (where the record writes the initial weights, the gradients and
what ``uo.from_native`` reads of the optimizer and scheduler, and the replays read them),
and ``trajectory`` (the lr each step used and the parameters after
it, under torch's names and layouts).

The model is ported by hand here (a small GPT-like model with the parameter kinds the
fixtures select by: an embedding, a LayerNorm, linear weights and biases); so are the two
autograd lines of fixture (a)'s training step on MindSpore, which computes gradients
rather than keeping them on parameters (``backward`` returns them, the optimizer is called
on them, and ``zero_grad`` has nothing to clear). The optimizer, scheduler, clip and lr
lines run as the script (or its port) wrote them.
"""

import json
import sys
import types
from pathlib import Path

import numpy as np

from unified_opt.conformance.trajectory import Recorder

VOCAB, WIDTH, HIDDEN = 11, 8, 16
#: (torch name, shape in torch), the order named_parameters() gives
PARAMETERS = [("wte.weight", (VOCAB, WIDTH)), ("ln.weight", (WIDTH,)), ("ln.bias", (WIDTH,)),
              ("fc.weight", (HIDDEN, WIDTH)), ("fc.bias", (HIDDEN,)),
              ("head.weight", (VOCAB, HIDDEN)), ("head.bias", (VOCAB,))]
#: Paddle keeps a Linear's weight as (in, out)
TRANSPOSED = {"paddle": {"fc.weight", "head.weight"}}
MINDSPORE_NAMES = {"wte.weight": "wte.embedding_table", "ln.weight": "ln.gamma",
                   "ln.bias": "ln.beta"}


def torch_model(dtype):
    import torch

    class TinyGPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(VOCAB, WIDTH)
            self.ln = torch.nn.LayerNorm(WIDTH)
            self.fc = torch.nn.Linear(WIDTH, HIDDEN)
            self.head = torch.nn.Linear(HIDDEN, VOCAB)

        def forward(self, tokens):
            return self.head(torch.tanh(self.fc(self.ln(self.wte(tokens)))))

    torch.manual_seed(0)
    model = TinyGPT().to(dtype)
    # the norm's scale and shift start away from 1 and 0, so decay on them would show
    with torch.no_grad():
        model.ln.weight.uniform_(0.5, 1.5)
        model.ln.bias.uniform_(-0.5, 0.5)
    return model


def paddle_model():
    import paddle

    class TinyGPT(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.wte = paddle.nn.Embedding(VOCAB, WIDTH)
            self.ln = paddle.nn.LayerNorm(WIDTH)
            self.fc = paddle.nn.Linear(WIDTH, HIDDEN)
            self.head = paddle.nn.Linear(HIDDEN, VOCAB)

    return TinyGPT()


def mindspore_model():
    import mindspore

    class TinyGPT(mindspore.nn.Cell):
        def __init__(self):
            super().__init__()
            self.wte = mindspore.nn.Embedding(VOCAB, WIDTH)
            self.ln = mindspore.nn.LayerNorm((WIDTH,))
            self.fc = mindspore.nn.Dense(WIDTH, HIDDEN)
            self.head = mindspore.nn.Dense(HIDDEN, VOCAB)

    return TinyGPT()


def transformers_stand_in():
    """transformers is not a test dependency: its linear warm-up helper, written from
    its documented formula (lr factor step / warmup while warming up, then falling
    linearly to 0 at num_training_steps) on torch's LambdaLR."""
    import torch

    def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps,
                                        last_epoch=-1):
        def factor(step):
            if step < num_warmup_steps:
                return step / max(1, num_warmup_steps)
            return max(0.0, (num_training_steps - step) /
                       max(1, num_training_steps - num_warmup_steps))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch)

    module = types.ModuleType("transformers")
    module.get_linear_schedule_with_warmup = get_linear_schedule_with_warmup
    return module


class Target:
    """The model's parameters under torch's names, read and fed per framework."""

    def __init__(self, framework: str, dtype: str):
        self.framework = framework
        if framework == "torch":
            import torch

            self.model = torch_model(getattr(torch, dtype))
        elif framework == "paddle":
            self.model = paddle_model()
        else:
            self.model = mindspore_model()
        if framework == "mindspore":
            own = dict(self.model.parameters_and_names())
            self.params = {name: own[MINDSPORE_NAMES.get(name, name)]
                           for name, _ in PARAMETERS}
        else:
            own = dict(self.model.named_parameters())
            self.params = {name: own[name] for name, _ in PARAMETERS}
        self.transposed = TRANSPOSED.get(framework, set())
        self.dtype = dtype

    def read(self) -> dict:
        out = {}
        for name, p in self.params.items():
            if self.framework == "torch":
                value = p.detach().cpu().numpy()
            elif self.framework == "paddle":
                value = p.numpy()
            else:
                value = p.asnumpy()
            out[name] = np.array(value.T if name in self.transposed else value)
        return out

    def load(self, weights: dict) -> None:
        for name, p in self.params.items():
            value = weights[name].T if name in self.transposed else weights[name]
            if self.framework == "torch":
                import torch

                with torch.no_grad():
                    p.copy_(torch.from_numpy(np.ascontiguousarray(value)))
            elif self.framework == "paddle":
                p.set_value(np.ascontiguousarray(value, dtype=np.float32))
            else:
                import mindspore

                p.set_data(mindspore.Tensor(np.ascontiguousarray(value, dtype=np.float32)))

    def feed(self, grads: dict, optimizer=None):
        """Set (torch, Paddle) or return (MindSpore, in the optimizer's order) the
        gradients of one step."""
        if self.framework == "mindspore":
            import mindspore

            by_id = {id(p): name for name, p in self.params.items()}
            return tuple(mindspore.Tensor(np.asarray(grads[by_id[id(p)]], dtype=np.float32))
                         for p in optimizer.parameters)
        for name, p in self.params.items():
            value = grads[name].T if name in self.transposed else grads[name]
            value = np.ascontiguousarray(value, dtype=self.dtype)
            if self.framework == "torch":
                import torch

                p.grad = torch.from_numpy(value)
            else:
                import paddle

                p.grad = paddle.to_tensor(value)
        return None


def run(job: dict) -> None:
    framework, steps = job["framework"], job["steps"]
    target = Target(framework, job.get("dtype", "float32"))
    stream = Path(job["stream"])
    if job["mode"] == "record":
        import torch

        torch.manual_seed(1)
        tokens = [torch.randint(0, VOCAB, (4, 6)) for _ in range(steps)]
        np.savez(stream.with_suffix(".init.npz"), **target.read())
        recorded = []

        def backward(model, it):            # the script's forward and backward pass
            logits = model(tokens[it][:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                     tokens[it][:, 1:].reshape(-1))
            loss.backward()
            recorded.append({n: p.grad.detach().numpy().copy()
                             for n, p in target.params.items()})
    else:
        target.load(dict(np.load(stream.with_suffix(".init.npz"))))
        saved = np.load(stream.with_suffix(".grads.npz"))
        grads = [{name: saved[f"{t}/{name}"] for name, _ in PARAMETERS} for t in range(steps)]
        holder = {}

        def backward(model, it):            # the same gradients, fed
            return target.feed(grads[it], holder.get("optimizer"))

    if framework == "torch":
        sys.modules["transformers"] = transformers_stand_in()
    namespace = {"__name__": f"port_fixture_{job['fixture']}"}
    source = job["source"]
    if framework == "mindspore":
        # the hand-ported autograd lines: gradients are computed, then handed over
        source = source.replace("    backward(model, it)\n", "    grads = backward(model, it)\n")
        source = source.replace("    optimizer.step()\n", "    optimizer(grads)\n")
        # nothing is kept on the parameters to clear
        source = source.replace("    optimizer.zero_grad(set_to_none=True)\n", "")
    exec(compile(source, f"{job['fixture']}.py", "exec"), namespace)
    model = target.model
    if "Classifier" in namespace:                  # the LightningModule's settings
        model.hparams = dict(namespace["Classifier"].hparams)
    made = namespace["make_optimizer"](model)
    optimizer, scheduler = made if isinstance(made, tuple) else (made, None)
    if job["mode"] == "replay":
        holder["optimizer"] = optimizer
    elif "train_step" not in namespace:
        # what the optimizer and its scheduler compute, read from the live torch objects:
        # the test runs the numpy float32 reference of it, the suite's own float32
        # reference (a hand-set lr, fixture (a)'s, has no scheduler object to read)
        import unified_opt as uo

        try:
            spec, groups = uo.from_native(optimizer, scheduler, names=model)
        except ValueError:     # a LambdaLR (the transformers stand-in): tabulated
            spec, groups = uo.from_native(optimizer, scheduler, names=model,
                                          sample_steps=steps)
        stream.with_suffix(".spec.json").write_text(json.dumps(
            {"spec": spec.to_dict(), "groups": [g.to_dict() for g in groups]}))
    if job.get("float32_hyperparameters"):
        # the conformance rule's second float32 reference: kernels that hold their
        # hyperparameters as float32 attributes (Paddle's Adam family computes
        # 1 - float32(beta2)) round them so; that rounding is float32 noise
        for group in optimizer.param_groups:
            for key in ("betas", "eps", "weight_decay", "momentum"):
                if key not in group:             # SGD's group has no betas and eps
                    continue
                value = group[key]
                group[key] = (tuple(float(np.float32(x)) for x in value)
                              if isinstance(value, tuple) else float(np.float32(value)))
    recorder = Recorder()
    for it in range(steps):
        if "train_step" in namespace:              # fixture (a): its own training step
            lr = namespace["train_step"](model, optimizer, it, backward)
        else:                                      # the trainer's loop
            fed = backward(model, it)
            lr = optimizer.param_groups[0]["lr"]
            if framework == "mindspore":
                optimizer(fed)
            else:
                optimizer.step()
            if scheduler is not None:
                scheduler.step()
            if framework != "mindspore":
                optimizer.zero_grad(set_to_none=True)
        recorder.add(float(lr), target.read(), {})
    recorder.trajectory().save(job["trajectory"], compress=False)
    if job["mode"] == "record":
        np.savez(stream.with_suffix(".grads.npz"),
                 **{f"{t}/{name}": g for t, step in enumerate(recorded)
                    for name, g in step.items()})


if __name__ == "__main__":
    for one in json.loads(Path(sys.argv[1]).read_text()):     # a list of jobs
        run(one)
