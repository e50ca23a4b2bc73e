"""Port fixture (a): a GPT training script's optimizer set-up and training step.

The shape reproduced, as read in karpathy/nanoGPT (train.py: the configuration block
overridden by ``exec(open('configurator.py').read())``, ``get_lr(it)``, the
``param_group['lr']`` loop, ``clip_grad_norm_``; model.py: ``configure_optimizers``):
decay groups chosen by ``p.dim() >= 2``, a hand-written linear warmup then cosine decay
written into every ``param_group['lr']`` each iteration, a global-norm clip of all the
model's parameters right before the step, and ``fused=True`` passed through
``**extra_args`` where torch's AdamW has a fused kernel. Written for this project's tests.
"""

import inspect
import math
import os

import torch

# the run's settings; a configuration file may replace any of them
learning_rate = 3e-2
min_lr = 3e-3
warmup_iters = 8
lr_decay_iters = 50
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
exec(open(os.environ.get("PORT_FIXTURE_CONFIG", os.devnull)).read())


def configure_optimizers(model, weight_decay, learning_rate, betas, device_type):
    trainable = {name: p for name, p in model.named_parameters()}
    trainable = {name: p for name, p in trainable.items() if p.requires_grad}
    # matrices (embeddings, projections) decay; vectors (biases, norm scales) do not
    matrices = [p for name, p in trainable.items() if p.dim() >= 2]
    vectors = [p for name, p in trainable.items() if p.dim() < 2]
    groups = [
        {"params": matrices, "weight_decay": weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    counted = sum(p.numel() for p in matrices)
    print(f"{len(matrices)} decayed tensors ({counted:,} values), {len(vectors)} not")
    has_fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
    extra_args = dict(fused=True) if has_fused and device_type == "cpu" else dict()
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra_args)
    return optimizer


def get_lr(it):
    # linear warmup, then a cosine down to min_lr, then min_lr
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    progress = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coefficient = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr + coefficient * (learning_rate - min_lr)


def train_step(model, optimizer, it, backward):
    """One iteration: the lr of this iteration, the forward and backward pass
    (``backward``), the clip, the step."""
    lr = get_lr(it) if decay_lr else learning_rate
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    backward(model, it)
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return lr


def make_optimizer(model):
    return configure_optimizers(model, weight_decay, learning_rate, (beta1, beta2), "cpu")
