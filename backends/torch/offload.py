"""Host offload for torch: optimizer state in host memory, the update computed there,
only the new parameter values written back to the parameter's device.

:class:`OffloadAdam` runs torch's fused CPU Adam kernel (``torch.optim.adam.adam(...,
fused=True)``) over host state; :class:`HostStaging` is the transfer part, shared with
``SpecOptimizer(offload=True)`` (any spec's own update on the host). A parameter that
already lives on the CPU is updated in place: no copy. Where a GPU exists the host
buffers are pinned, so the copies can run asynchronously.
"""

from __future__ import annotations

import torch
from torch.optim import adam as torch_adam

HOST = torch.device("cpu")


def _pin() -> bool:
    return torch.cuda.is_available()


def host_zeros_like(p) -> torch.Tensor:
    return torch.zeros(p.shape, dtype=p.dtype, device=HOST, pin_memory=_pin())


class HostStaging:
    """Per device parameter: host buffers for its value and gradient."""

    def __init__(self) -> None:
        self._buffers: dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] = {}

    def fetch(self, p) -> tuple[torch.Tensor, torch.Tensor]:
        """``(host value, host gradient)`` of ``p`` (``p`` itself on the CPU)."""
        if p.device.type == "cpu":
            return p.detach(), p.grad
        if p not in self._buffers:
            self._buffers[p] = (host_zeros_like(p), host_zeros_like(p))
        value, grad = self._buffers[p]
        value.copy_(p.detach())     # synchronous: the host computes on it next
        grad.copy_(p.grad)
        return value, grad

    @staticmethod
    def write_back(p, value) -> None:
        """The new value onto ``p``'s device (a no-op when it is ``p`` itself)."""
        if value is not p and value.data_ptr() != p.data_ptr():
            p.copy_(value, non_blocking=value.is_pinned())


def keep_state_on_host(optimizer) -> None:
    """``load_state_dict`` moves state to each parameter's device; move it back."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                state[key] = value.to(HOST)


class OffloadAdam(torch.optim.Optimizer):
    """``torch.optim.Adam``'s math (the fused CPU kernel) with the state on the host.

    Same arguments and state names as ``torch.optim.Adam`` (``exp_avg``, ``exp_avg_sq``,
    ``max_exp_avg_sq``, ``step``); every state tensor lives in host memory whatever the
    parameters' device, and survives ``state_dict``/``load_state_dict`` there.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize}
        super().__init__(params, defaults)
        self._staging = HostStaging()
        self.register_load_state_dict_post_hook(keep_state_on_host)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            devices, hosts, grads, exp_avgs, exp_avg_sqs, maxes, steps = ([] for _ in range(7))
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("OffloadAdam does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = host_zeros_like(p)
                    state["exp_avg_sq"] = host_zeros_like(p)
                    if group["amsgrad"]:
                        state["max_exp_avg_sq"] = host_zeros_like(p)
                value, grad = self._staging.fetch(p)
                devices.append(p)
                hosts.append(value)
                grads.append(grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                if group["amsgrad"]:
                    maxes.append(state["max_exp_avg_sq"])
                steps.append(state["step"])
            if not devices:
                continue
            beta1, beta2 = group["betas"]
            torch_adam.adam(hosts, grads, exp_avgs, exp_avg_sqs, maxes, steps, fused=True,
                            amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                            weight_decay=group["weight_decay"], eps=group["eps"],
                            maximize=group["maximize"])
            for p, value in zip(devices, hosts):
                HostStaging.write_back(p, value)
        return loss
