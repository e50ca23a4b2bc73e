"""torch's own optimizer test database (``torch.testing._internal.common_optimizers.optim_db``,
which needs the ``expecttest`` package): every configuration an optimizer's
``OptimizerInfo`` gives for the device, built as ``torch.optim.<Name>(params, **kwargs)``,
read by ``uo.from_native`` into the spec its preset gives, and torch's own optimizer
(``foreach`` off and on) followed against that spec's float64 oracle under the
conformance rule: the lr, the parameters and the spec state, every step.

Parametrized by optimizer (``OPTIMIZERS``: the ones ``from_native`` reads) and device: a
configuration the device cannot run (``capturable``, CUDA only) is the CUDA run's, skipped
with the reason where no CUDA device is present. A configuration ``from_native`` refuses
(a Tensor lr) is checked to be refused with an error naming the argument. Muon takes the
matrices of its record (it updates 2-D parameters only) and has no ``foreach``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import require
from support import SMALL_PARAMS, case_of, judge, record

import unified_opt as uo
from unified_opt.backend import load
from unified_opt.records import record_of

pytestmark = require("torch")

#: the torch.optim classes whose OptimizerInfo configurations are checked
OPTIMIZERS = ("ASGD", "Muon")
#: constructor arguments that choose an implementation, not the numbers
IMPLEMENTATION = ("foreach", "capturable", "differentiable", "fused")


def _info(name: str):
    pytest.importorskip("expecttest", reason="torch's optim_db imports expecttest")
    from torch.testing._internal.common_optimizers import optim_db

    found = [info for info in optim_db if info.optim_cls.__name__ == name]
    assert len(found) == 1, f"optim_db has {len(found)} OptimizerInfo for {name}"
    return found[0]


#: why a configuration is refused by uo.from_native (checked to raise)
TENSOR_LR = "a Tensor lr (the presets read the lr as a float: uo.from_native refuses it by name)"


def _not_run(kwargs: dict) -> str:
    """Why a configuration is left out on every device ('' where it runs)."""
    import torch

    if isinstance(kwargs.get("lr"), torch.Tensor):
        return TENSOR_LR
    if kwargs.get("differentiable"):
        return "differentiable=True (autograd through the step, not a spec's numbers)"
    return ""


def _configurations(name: str, device: str) -> list:
    """``(description, kwargs)`` of the configurations torch's db gives for ``device``
    and not for the CPU when ``device`` is "cuda"; each one's reason where it is left out."""
    info = _info(name)
    cpu = info.optim_inputs_func("cpu")
    given = cpu if device == "cpu" else [
        i for i in info.optim_inputs_func(device)
        if i.desc not in {c.desc for c in cpu}]
    assert all(i.params is None for i in given), "a configuration with its own params"
    return [(i.desc, dict(i.kwargs), _not_run(i.kwargs)) for i in given]


def _state_names(name: str) -> dict:
    row = next(c for c in load("torch").classes if c.name == f"torch.optim.{name}")
    return dict(row.state)


def _params_of(name: str) -> dict:
    """The shapes the class takes: its algorithm's record's (Muon: matrices), else the
    small standard set."""
    row = next(c for c in load("torch").classes if c.name == f"torch.optim.{name}")
    shapes = record_of(row.lowerings[0].algorithm).params
    return SMALL_PARAMS if shapes is None else shapes


def _foreach_modes(name: str) -> tuple:
    """``foreach`` off and on, or None where the class has no such argument (Muon)."""
    return (False, True) if "foreach" in _info(name).supported_impls else (None,)


def _built(name: str, params: list, kwargs: dict, foreach: bool | None):
    import torch

    extra = {} if foreach is None else {"foreach": foreach}
    return getattr(torch.optim, name)(params, **extra, **kwargs)


def _follow(name: str, desc: str, kwargs: dict, foreach: bool | None, device: str):
    import torch

    case_id = "optim_db_" + "_".join(f"{name} {desc}".replace(",", " ").split())
    shapes = _params_of(name)
    initial = case_of(case_id, uo.SGD(), params=shapes).initial_params()
    params = {n: torch.nn.Parameter(torch.tensor(a, device=device))
              for n, a in initial.items()}
    optimizer = _built(name, list(params.values()), kwargs, foreach)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # capturable: "chooses an implementation"
        spec, groups = uo.from_native(optimizer)
    assert groups == []
    assert spec == uo.preset(f"torch.optim.{name}", **{
        k: v for k, v in kwargs.items() if k not in IMPLEMENTATION})
    case = case_of(case_id, spec, params=shapes)
    state_names = _state_names(name)

    def step(grads):
        for n, p in params.items():
            p.grad = torch.tensor(grads[n], device=device)
        optimizer.step()
        return float(optimizer.param_groups[0]["lr"])

    def read():
        values = {n: p.detach().cpu().numpy().copy() for n, p in params.items()}
        state = {n: {ours: np.asarray(optimizer.state[p][theirs].detach().cpu().numpy())
                     for ours, theirs in state_names.items()}
                 for n, p in params.items()}
        return values, state

    comparison = judge(record(step, read, case), case)
    assert comparison.passed, (f"{name}({kwargs}, foreach={foreach}) on {device}, "
                               f"{desc!r}: {comparison.detail}")
    return spec


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_torch_optim_db_configurations_follow_the_oracle(name, device):
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        configurations = _configurations(name, device)
        pytest.skip(f"no CUDA device: torch's {name} configurations for CUDA only "
                    f"({'; '.join(d for d, _, _ in configurations)}) need one")
    ran, left_out = [], []
    modes = _foreach_modes(name)
    for desc, kwargs, why in _configurations(name, device):
        if why == TENSOR_LR:
            optimizer = _built(name, [torch.nn.Parameter(torch.zeros(2, 2))], kwargs, None)
            with pytest.raises(TypeError, match="lr must be a float"):
                uo.from_native(optimizer)
            continue
        if why:
            left_out.append(f"{desc}: {why}")
            continue
        for foreach in modes:
            ran.append(_follow(name, desc, kwargs, foreach, device))
    if device == "cpu":
        # the db's CPU configurations all run, and between them turn every knob
        assert not left_out, left_out
        assert len({s.to_dict().__repr__() for s in ran}) == len(ran) // len(modes) >= 5
