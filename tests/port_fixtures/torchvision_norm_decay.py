"""Port fixture (e): a classification recipe's weight decay by norm-layer base classes.

The shape reproduced, as read in pytorch/vision (references/classification/utils.py,
``set_weight_decay``; references/classification/train.py, the SGD and the warmup
scheduler): the parameters of modules that are instances of torch's norm base classes
(``torch.nn.modules.batchnorm._BatchNorm``, ``_InstanceNorm``, ``LayerNorm``,
``GroupNorm``, ``LocalResponseNorm``) take ``norm_weight_decay``, the rest the recipe's
weight decay, each module's own parameters only; SGD with Nesterov momentum over the
non-empty groups, a linear warmup then cosine annealing chained by ``SequentialLR``.
Written for this project's tests.
"""

import torch


class Recipe:
    lr = 0.05
    momentum = 0.9
    weight_decay = 2e-3
    norm_weight_decay = 0.0
    warmup_epochs = 5
    epochs = 60


def set_weight_decay(model, weight_decay, norm_weight_decay):
    norm_classes = (
        torch.nn.modules.batchnorm._BatchNorm,
        torch.nn.LayerNorm,
        torch.nn.GroupNorm,
        torch.nn.modules.instancenorm._InstanceNorm,
        torch.nn.LocalResponseNorm,
    )
    params = {"other": [], "norm": []}
    decays = {"other": weight_decay, "norm": norm_weight_decay}

    def walk(module):
        for p in module.parameters(recurse=False):
            if not p.requires_grad:
                continue
            params["norm" if isinstance(module, norm_classes) else "other"].append(p)
        for child in module.children():
            walk(child)

    walk(model)
    return [{"params": params[key], "weight_decay": decays[key]}
            for key in params if len(params[key]) > 0]


def make_optimizer(model):
    recipe = Recipe()
    groups = set_weight_decay(model, recipe.weight_decay, recipe.norm_weight_decay)
    optimizer = torch.optim.SGD(groups, lr=recipe.lr, momentum=recipe.momentum,
                                weight_decay=recipe.weight_decay, nesterov=True)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1,
                                               total_iters=recipe.warmup_epochs)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=recipe.epochs - recipe.warmup_epochs)
    scheduler = torch.optim.lr_scheduler.SequentialLR(
        optimizer, schedulers=[warmup, cosine], milestones=[recipe.warmup_epochs])
    return optimizer, scheduler
