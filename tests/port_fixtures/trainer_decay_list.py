"""Port fixture (c): a Trainer-style optimizer and linear-warmup scheduler.

The shape reproduced, as read in huggingface/transformers (src/transformers/trainer.py,
``Trainer.create_optimizer`` / ``create_scheduler``; src/transformers/trainer_pt_utils.py,
``get_parameter_names``; the ``get_linear_schedule_with_warmup`` helper of
src/transformers/optimization.py): the names of the parameters outside any
``LayerNorm``, found by recursing over the children, minus the biases, decay; the rest do
not; AdamW gets its arguments from a keyword dict, and the scheduler warms up linearly
and then decays linearly to zero. Written for this project's tests (transformers' own
helper is imported, as a Trainer script does).
"""

import torch
from transformers import get_linear_schedule_with_warmup

LAYER_NORMS = [torch.nn.LayerNorm]


class Arguments:
    learning_rate = 2e-2
    weight_decay = 0.05
    adam_beta1 = 0.9
    adam_beta2 = 0.98
    adam_epsilon = 1e-6
    warmup_steps = 10


def get_parameter_names(model, forbidden_layer_types):
    """Names of the parameters not inside a module of ``forbidden_layer_types``."""
    result = []
    for name, child in model.named_children():
        result += [
            f"{name}.{n}"
            for n in get_parameter_names(child, forbidden_layer_types)
            if not isinstance(child, tuple(forbidden_layer_types))
        ]
    result += [name for name, _ in model.named_parameters(recurse=False)]
    return result


def create_optimizer_and_scheduler(model, args, num_training_steps):
    decay_parameters = get_parameter_names(model, LAYER_NORMS)
    decay_parameters = [name for name in decay_parameters if "bias" not in name]
    grouped = [
        {"params": [p for n, p in model.named_parameters()
                    if n in decay_parameters and p.requires_grad],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters()
                    if n not in decay_parameters and p.requires_grad],
         "weight_decay": 0.0},
    ]
    optimizer_kwargs = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2),
                        "eps": args.adam_epsilon}
    optimizer = torch.optim.AdamW(grouped, **optimizer_kwargs)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=num_training_steps)
    return optimizer, scheduler


def make_optimizer(model):
    return create_optimizer_and_scheduler(model, Arguments(), num_training_steps=60)
