"""Third-party torch optimizers that a spec setting reproduces, checked on all three
backends (each framework in its own worker process) over 100 adversarial steps.

Mapping written down:
* ``pytorch_optimizer.Lion(lr, betas, weight_decay)`` (decoupled decay times lr, the
  defaults ``weight_decouple=True, fixed_decay=False``) = ``uo.Lion(lr, betas,
  weight_decay)``.
* ``came_pytorch.CAME(lr, betas, eps, clip_threshold, weight_decay)`` (the CAME authors'
  code: constant beta2, no bias correction, 1-D parameters without the confidence term)
  = ``uo.get("came", ...)`` with the same arguments.
"""

import importlib.util

import pytest
from helpers import (
    installed_frameworks,
    load_trajectory,
    reference_trajectories,
    run_framework_jobs,
    worst_ratio,
)

import unified_opt as uo

STEPS = 100
FACTOR = 10.0
SHAPES = {"w": (8, 6), "bias": (6,), "v22": (22,), "w3d": (3, 4, 5)}

PEERS = [
    ("lion", "pytorch_optimizer.Lion", dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1),
     uo.Lion(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)),
    ("lion-betas", "pytorch_optimizer.Lion", dict(lr=3e-3, betas=(0.95, 0.98)),
     uo.Lion(lr=3e-3, betas=(0.95, 0.98))),
    ("came", "came_pytorch.CAME", dict(lr=0.01, weight_decay=0.1),
     uo.get("came", lr=0.01, weight_decay=0.1)),
    ("came-betas", "came_pytorch.CAME",
     dict(lr=0.02, betas=(0.8, 0.99, 0.999), clip_threshold=0.5),
     uo.get("came", lr=0.02, betas=(0.8, 0.99, 0.999), clip_threshold=0.5)),
]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pytorch_optimizer") is None or
    importlib.util.find_spec("came_pytorch") is None or
    importlib.util.find_spec("torch") is None, reason="needs torch and pytorch-optimizer")


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    out = tmp_path_factory.mktemp("peers")
    jobs = {fw: [] for fw in installed_frameworks()}
    for peer_id, qualified, kwargs, spec in PEERS:
        common = {"steps": STEPS, "shapes": SHAPES}
        jobs["torch"].append({"id": f"{peer_id}@peer", "mode": "native",
                              "qualified": qualified, "kwargs": kwargs, **common})
        for fw in jobs:
            jobs[fw].append({"id": f"{peer_id}@{fw}", "mode": "build",
                             "spec": spec.to_dict(), **common})
    run_framework_jobs(jobs, out)
    return out


@pytest.mark.parametrize("peer_id, qualified, kwargs, spec", PEERS, ids=[p[0] for p in PEERS])
def test_spec_follows_the_peer_on_every_backend(trajectories, peer_id, qualified, kwargs, spec):
    oracle, floors = reference_trajectories(spec, SHAPES, STEPS)
    peer = load_trajectory(trajectories / f"{peer_id}@peer.npz")
    assert worst_ratio(peer, oracle, floors) <= FACTOR, f"{qualified} left the spec"
    for fw in installed_frameworks():
        built = load_trajectory(trajectories / f"{peer_id}@{fw}.npz")
        ratio = worst_ratio(built, oracle, floors)
        assert ratio <= FACTOR, f"uo.{type(spec).__name__} on {fw}: {ratio:.1f} x floor"
