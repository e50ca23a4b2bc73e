"""A torch optimizer that runs a spec's own update (written once, in the spec)."""

from __future__ import annotations

import torch

from .ops import torch_ops


class SpecOptimizer(torch.optim.Optimizer):
    """``torch.optim.Optimizer`` driving ``spec.update`` per parameter.

    State per parameter: ``step`` (a float tensor, like torch's own optimizers) and the
    spec's state arrays under the spec's names. The lr is ``param_groups[i]["lr"]``, so
    torch LR schedulers drive it as usual.
    """

    def __init__(self, params, spec, param_specs, lr: float):
        super().__init__(params, {"lr": lr})
        self.spec = spec
        self._param_specs = param_specs   # one spec per parameter (name rules applied)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                spec = self._param_specs[index]
                index += 1
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("SpecOptimizer does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state.update(spec.init(p.detach(), torch_ops))
                state["step"] += 1
                arrays = {k: state[k] for k in spec.state_names()}
                new_p, new_state = spec.update(p.detach(), p.grad, arrays, lr=group["lr"],
                                               step=int(state["step"].item()), ops=torch_ops)
                p.copy_(new_p)
                for key, value in new_state.items():
                    state[key] = value
        return loss

    def spec_state(self, p) -> dict:
        state = self.state.get(p, {})
        return {k: state[k] for k in self._param_specs[self._index(p)].state_names()
                if k in state}

    def _index(self, p) -> int:
        flat = [q for g in self.param_groups for q in g["params"]]
        return next(i for i, q in enumerate(flat) if q is p)
