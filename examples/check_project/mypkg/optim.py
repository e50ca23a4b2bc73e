"""LAMB as a team writes it when porting a MindSpore recipe to torch, and the factory
`unified-opt check` and the pytest plugin drive:

    unified-opt check mypkg.optim:make_lamb --spec "lamb(lr=1e-3, weight_decay=0.01)"
"""

import torch


class MyLamb(torch.optim.Optimizer):
    """Bias-corrected moments, decay added to the update, trust ratio 1 at a zero norm."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p),
                                 exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + group["eps"])
                update = update + group["weight_decay"] * p
                w_norm, u_norm = float(p.norm()), float(update.norm())
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                p.sub_(update * (group["lr"] * ratio))


def make_lamb(params):
    """The factory: the optimizer over ``params``, as the project builds it."""
    return MyLamb(params, lr=1e-3, weight_decay=0.01)
