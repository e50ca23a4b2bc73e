"""Port fixture (b): decay sets chosen by module type.

The shape reproduced, as read in karpathy/minGPT (mingpt/model.py,
``GPT.configure_optimizers``): every parameter is put in a decay or a no-decay set by
walking ``named_modules()`` and each module's ``named_parameters()``: biases never decay,
the weights of ``Linear`` modules decay, the weights of ``LayerNorm`` and ``Embedding``
modules do not; both sets are checked to cover every parameter once, then AdamW gets the
two groups. Written for this project's tests.
"""

import torch


class TrainConfig:
    learning_rate = 2e-2
    betas = (0.9, 0.95)
    weight_decay = 0.1


def configure_optimizers(model, train_config):
    decay, no_decay = set(), set()
    decayed_types = (torch.nn.Linear,)
    kept_types = (torch.nn.LayerNorm, torch.nn.Embedding)
    for module_name, module in model.named_modules():
        for short_name, p in module.named_parameters():
            full_name = f"{module_name}.{short_name}" if module_name else short_name
            if short_name.endswith("bias"):
                no_decay.add(full_name)
            elif short_name.endswith("weight") and isinstance(module, decayed_types):
                decay.add(full_name)
            elif short_name.endswith("weight") and isinstance(module, kept_types):
                no_decay.add(full_name)
    by_name = {name: p for name, p in model.named_parameters()}
    assert not decay & no_decay, f"in both sets: {decay & no_decay}"
    unsorted = by_name.keys() - (decay | no_decay)
    assert not unsorted, f"in no set: {unsorted}"
    groups = [
        {"params": [by_name[name] for name in sorted(decay)],
         "weight_decay": train_config.weight_decay},
        {"params": [by_name[name] for name in sorted(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=train_config.learning_rate,
                                  betas=train_config.betas)
    return optimizer


def make_optimizer(model):
    return configure_optimizers(model, TrainConfig())
