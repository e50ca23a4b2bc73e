"""A torch optimizer that runs a spec's own update (written once, in the spec)."""

from __future__ import annotations

import torch

from .offload import HostStaging, keep_state_on_host
from .ops import torch_ops

STEP = "step"


class SpecOptimizer(torch.optim.Optimizer):
    """``torch.optim.Optimizer`` driving ``spec.update`` per parameter.

    State per parameter: ``step`` (a float tensor, like torch's own optimizers) and the
    spec's state arrays under the spec's names (those ``spec.init`` made: for factored
    specs they depend on the parameter's shape). The lr is ``param_groups[i]["lr"]``, so
    torch LR schedulers drive it as usual.

    With ``offload=True`` the state lives in host memory and the update runs there on
    host copies of the parameter and gradient; only the new value goes back to the
    parameter's device (see :mod:`.offload`).
    """

    def __init__(self, params, spec, param_specs, lr: float, offload: bool = False):
        super().__init__(params, {"lr": lr})
        self.spec = spec
        self.offload = offload
        self._param_specs = param_specs   # one spec per parameter (name rules applied)
        self._staging = HostStaging() if offload else None
        if offload:
            self.register_load_state_dict_post_hook(keep_state_on_host)

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
                value, grad = self._staging.fetch(p) if self.offload else (p.detach(), p.grad)
                state = self.state[p]
                if not state:
                    state[STEP] = torch.tensor(0.0)
                    state.update(spec.init(value, torch_ops))
                state[STEP] += 1
                arrays = {k: t for k, t in state.items() if k != STEP}
                new_p, new_state = spec.update(value, grad, arrays, lr=group["lr"],
                                               step=int(state[STEP].item()), ops=torch_ops)
                if self.offload and p.device.type != "cpu":
                    value.copy_(new_p)
                    HostStaging.write_back(p, value)
                else:
                    p.copy_(new_p)
                for key, array in new_state.items():
                    state[key] = array
        return loss

    def spec_state(self, p) -> dict:
        return {k: t for k, t in self.state.get(p, {}).items() if k != STEP}
