"""Parameters, gradients and checks shared by the offload tests (test_offload_adam.py,
test_offload_loops.py, test_cuda_offload.py)."""

import torch

from unified_opt.backends.torch.offload import OffloadAdam
from unified_opt.backends.torch.pipeline import PIECE_ALIGNMENT

#: mixed sizes: large ones cut into pieces (one not a multiple of any vector width),
#: small ones batched together, a 0-size one
SHAPES = [(3 * PIECE_ALIGNMENT + 13,), (7, 5), (2 * PIECE_ALIGNMENT,), (0,), (1,),
          (300, 700), (33,)]
#: small batches so that these sizes take several batches and cuts
SMALL_BATCHES = {"batch_elements": 2 * PIECE_ALIGNMENT, "first_batch_elements": PIECE_ALIGNMENT}
STEPS = 4


def make_params(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in SHAPES]


def grads_at(step):
    g = torch.Generator().manual_seed(1000 + step)
    out = [torch.randn(s, generator=g) * 10.0 ** (i % 3 - 1) for i, s in enumerate(SHAPES)]
    out[1][2] = 0.0                     # zeros and tiny values beside large ones
    out[4].fill_(1e-30)
    return out


def two_groups(params, **kw):
    return OffloadAdam([{"params": params[:3], "weight_decay": 0.1},
                        {"params": params[3:], "amsgrad": True, "maximize": True}],
                       lr=0.01, **kw)


def run_steps(optimizer, params, steps=STEPS, skip=None):
    for t in range(steps):
        for i, (p, g) in enumerate(zip(params, grads_at(t))):
            p.grad = None if skip == (t, i) else g.to(p.device)
        optimizer.step()
    return [p.detach().cpu() for p in params]


def assert_same(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"parameter {i} {list(x.shape)}"


def state_copy(optimizer, params):
    return [{k: v.clone() for k, v in optimizer.state[p].items()} for p in params]


def assert_same_state(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys(), i
        for k in x:
            assert torch.equal(x[k], y[k]), f"parameter {i} state {k}"
