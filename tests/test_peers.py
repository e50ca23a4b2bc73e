"""Third-party torch optimizers that a spec setting reproduces: each peer built by hand in
the torch worker (a conformance case with ``Case.native``) follows the float64 oracle of
its spec, and for the first ones the spec built on every backend follows it too (and,
on torch, the peer's own trajectory). Each case runs in the conformance worker of its
framework, over the conformance gradient stream (zeros, 1e-30, 500, mixed magnitudes).

Peers (installed with ``pip install --no-deps came-pytorch torch-optimizer
pytorch-ranger pytorch-optimizer``; a peer's cases are left out when its package is
missing). The mapping, peer flags -> spec:

* ``pytorch_optimizer.Lion(lr, betas, weight_decay)`` (decoupled decay times lr, the
  defaults ``weight_decouple=True, fixed_decay=False``) = ``uo.Lion(lr, betas,
  weight_decay)``.
* ``came_pytorch.CAME(lr, eps, clip_threshold, betas, weight_decay)`` (the CAME authors'
  code: constant beta2, no bias correction, 1-D parameters without the confidence term)
  -> ``uo.CAME`` with the same arguments (the spec's defaults are the authors').
* ``pytorch_optimizer.CAME(lr, betas, weight_decay, clip_threshold, eps1, eps2)`` ->
  ``uo.CAME(eps=(eps1, eps2), ...)`` (its default ``weight_decouple=True``).
* ``torch_optimizer.Lamb(lr, betas, eps, weight_decay, clamp_value, debias)`` ->
  ``uo.Lamb(bias_correction="step" if debias else "none", weight_norm_clamp=clamp_value,
  always_adapt=True)``.
* ``torch_optimizer.LARS(lr, momentum, dampening, weight_decay, nesterov,
  trust_coefficient, eps)`` -> ``uo.LARS(lr_placement="outside", momentum_init="grad",
  zero_norm_rule="raw_if_norm_zero")``.
* ``pytorch_optimizer.LARS(lr, weight_decay, momentum, dampening, trust_coefficient,
  nesterov)`` -> ``uo.LARS(eps=0, lr_placement="outside", momentum_init="zeros",
  always_adapt=True, zero_norm_rule="one_if_denominator_zero", exclude_1d=True)``.
* ``pytorch_optimizer.RAdam(lr, betas, eps, weight_decay)`` (its defaults
  ``weight_decouple=True, degenerated_to_sgd=False``) -> ``uo.RAdam(
  decoupled_weight_decay=True, unrectified_step="none")``.
* ``torch_optimizer.Adafactor(lr, eps2, clip_threshold, decay_rate, beta1, weight_decay,
  scale_parameter, relative_step, warmup_init)`` -> ``uo.Adafactor(eps=eps2,
  eps_mode="add", decay_rate=-decay_rate, decay_lr="scaled", lr=1e-2 when relative_step)``
  (it fails on 3-D parameters, so none here; with ``relative_step`` it reports no lr and
  runs with the cap 1e-2).
* ``torch.optim.Adafactor`` -> ``uo.preset("torch.optim.Adafactor", ...)`` (it divides by
  the element count: no 0-size parameter).
* ``pytorch_optimizer.Adan(lr, betas, eps, weight_decay, weight_decouple)`` (its
  per-parameter loop and its ``foreach`` form) -> ``uo.Adan(weight_decay_form=
  "decoupled" if weight_decouple else "proximal")``.
* ``pytorch_optimizer.AdEMAMix(lr, betas, alpha, t_alpha_beta3, eps, weight_decay,
  weight_decouple, fixed_decay)`` -> ``uo.AdEMAMix(alpha_warmup=t_alpha_beta3,
  beta3_warmup=t_alpha_beta3, decoupled_weight_decay=weight_decouple,
  decay_times_lr=not fixed_decay)``.
* ``schedulefree.SGDScheduleFree`` and ``schedulefree.AdamWScheduleFree`` (after
  ``train()``, which the driver calls) -> ``uo.ScheduleFreeSGD`` and
  ``uo.ScheduleFreeAdamW`` with the same arguments; the point to evaluate at is judged
  too.
"""

import importlib.util

import pytest
from support import DENSE_PARAMS, FLAT_PARAMS, installed_frameworks

import unified_opt as uo
from unified_opt.conformance.cases import Case, Native
from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import floor_trajectories

LION = "pytorch_optimizer.Lion"
CAME = "came_pytorch.CAME"
CAME_KW = dict(lr=0.01, betas=(0.9, 0.999, 0.99), eps=(1e-30, 1e-16), weight_decay=0.1)

# (id, qualified peer, its kwargs, the spec, parameters, fixed lr, built on every backend)
PEERS = [
    ("lion", LION, dict(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1),
     uo.Lion(lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1), DENSE_PARAMS, None, True),
    ("lion-betas", LION, dict(lr=3e-3, betas=(0.95, 0.98)),
     uo.Lion(lr=3e-3, betas=(0.95, 0.98)), DENSE_PARAMS, None, True),
    ("came", CAME, CAME_KW, uo.get("came", **CAME_KW), DENSE_PARAMS, None, True),
    ("came-betas", CAME, dict(lr=0.02, betas=(0.8, 0.99, 0.999), clip_threshold=0.5),
     uo.get("came", lr=0.02, betas=(0.8, 0.99, 0.999), clip_threshold=0.5), DENSE_PARAMS,
     None, True),
    ("came-no-decay", CAME, dict(CAME_KW, weight_decay=0.0),
     uo.get("came", **dict(CAME_KW, weight_decay=0.0)), DENSE_PARAMS, None, False),
    ("pytorch-optimizer-came", "pytorch_optimizer.CAME",
     dict(lr=0.01, weight_decay=0.1, eps1=1e-30, eps2=1e-16, foreach=False),
     uo.CAME(lr=0.01, weight_decay=0.1), DENSE_PARAMS, None, False),
    *[(f"torch-optimizer-lamb-debias-{debias}", "torch_optimizer.Lamb",
       dict(lr=0.01, weight_decay=0.05, clamp_value=3.0, debias=debias),
       uo.Lamb(lr=0.01, weight_decay=0.05, weight_norm_clamp=3.0, always_adapt=True,
               bias_correction="step" if debias else "none"), DENSE_PARAMS, None, False)
      for debias in (False, True)],
    ("torch-optimizer-lars", "torch_optimizer.LARS",
     dict(lr=0.5, momentum=0.9, dampening=0.1, weight_decay=0.01, trust_coefficient=0.02,
          eps=1e-8),
     uo.LARS(lr=0.5, momentum=0.9, dampening=0.1, weight_decay=0.01, trust_coefficient=0.02,
             eps=1e-8, lr_placement="outside", momentum_init="grad",
             zero_norm_rule="raw_if_norm_zero"), DENSE_PARAMS, None, False),
    ("pytorch-optimizer-lars", "pytorch_optimizer.LARS",
     dict(lr=0.5, momentum=0.9, weight_decay=0.01, trust_coefficient=0.02, foreach=False),
     uo.LARS(lr=0.5, momentum=0.9, weight_decay=0.01, trust_coefficient=0.02, eps=0.0,
             lr_placement="outside", momentum_init="zeros", always_adapt=True,
             zero_norm_rule="one_if_denominator_zero", exclude_1d=True), DENSE_PARAMS, None,
     False),
    ("pytorch-optimizer-radam", "pytorch_optimizer.RAdam",
     dict(lr=0.01, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.1, foreach=False),
     uo.RAdam(lr=0.01, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.1,
              decoupled_weight_decay=True, unrectified_step="none"), DENSE_PARAMS, None, True),
    *[(f"torch-optimizer-adafactor-relative-{relative}", "torch_optimizer.Adafactor",
       dict(lr=None if relative else 0.01, beta1=beta1, weight_decay=0.1,
            relative_step=relative),
       uo.Adafactor(lr=0.01, beta1=beta1, weight_decay=0.1, relative_step=relative,
                    eps=(1e-30, 1e-3), eps_mode="add", decay_lr="scaled"), FLAT_PARAMS,
       1e-2 if relative else None, False)
      for relative, beta1 in ((True, None), (False, 0.9))],
    ("pytorch-optimizer-adan", "pytorch_optimizer.Adan", dict(lr=0.01, eps=1e-3, foreach=False),
     uo.Adan(lr=0.01, eps=1e-3), DENSE_PARAMS, None, True),
    ("pytorch-optimizer-adan-proximal", "pytorch_optimizer.Adan",
     dict(lr=0.02, weight_decay=0.5, foreach=False), uo.Adan(lr=0.02, weight_decay=0.5),
     DENSE_PARAMS, None, False),
    ("pytorch-optimizer-adan-foreach-decoupled", "pytorch_optimizer.Adan",
     dict(lr=0.02, betas=(0.9, 0.8, 0.999), weight_decay=0.5, weight_decouple=True,
          foreach=True),
     uo.Adan(lr=0.02, betas=(0.9, 0.8, 0.999), weight_decay=0.5,
             weight_decay_form="decoupled"), DENSE_PARAMS, None, False),
    ("pytorch-optimizer-ademamix", "pytorch_optimizer.AdEMAMix",
     dict(lr=0.01, eps=1e-3, foreach=False),
     uo.AdEMAMix(lr=0.01, eps=1e-3, decoupled_weight_decay=False), DENSE_PARAMS, None, True),
    ("pytorch-optimizer-ademamix-warmup-l2", "pytorch_optimizer.AdEMAMix",
     dict(lr=0.01, alpha=8.0, t_alpha_beta3=30, weight_decay=0.3, foreach=False),
     uo.AdEMAMix(lr=0.01, alpha=8.0, alpha_warmup=30, beta3_warmup=30, weight_decay=0.3,
                 decoupled_weight_decay=False), DENSE_PARAMS, None, False),
    ("pytorch-optimizer-ademamix-foreach-decoupled", "pytorch_optimizer.AdEMAMix",
     dict(lr=0.01, betas=(0.9, 0.99, 0.999), weight_decay=0.005, weight_decouple=True,
          fixed_decay=True, foreach=True),
     uo.AdEMAMix(lr=0.01, betas=(0.9, 0.99, 0.999), weight_decay=0.005, decay_times_lr=False),
     DENSE_PARAMS, None, False),
    ("schedulefree-sgd", "schedulefree.SGDScheduleFree",
     dict(lr=0.1, momentum=0.8, warmup_steps=10, weight_decay=0.05, r=1.0, foreach=False),
     uo.ScheduleFreeSGD(lr=0.1, momentum=0.8, warmup_steps=10, weight_decay=0.05, r=1.0),
     DENSE_PARAMS, None, True),
    ("schedulefree-adamw", "schedulefree.AdamWScheduleFree",
     dict(lr=0.02, betas=(0.8, 0.99), eps=1e-3, warmup_steps=10, weight_decay=0.1,
          foreach=True),
     uo.ScheduleFreeAdamW(lr=0.02, betas=(0.8, 0.99), eps=1e-3, warmup_steps=10,
                          weight_decay=0.1), DENSE_PARAMS, None, True),
    *[(f"torch-adafactor-{i}", "torch.optim.Adafactor", kw,
       uo.preset("torch.optim.Adafactor", **kw), DENSE_PARAMS, None, False)
      for i, kw in enumerate([{}, {"lr": 0.3, "weight_decay": 0.2, "beta2_decay": -0.5}])],
]


def _installed(qualified) -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("torch", qualified.split(".")[0]))


def _worker_cases():
    out = []
    for peer_id, qualified, kwargs, spec, params, fixed_lr, everywhere in PEERS:
        if not _installed(qualified):
            continue
        by_hand = Case(id=f"peer_{peer_id}", spec=spec, params=params, native=Native(
            qualified, kwargs, framework="torch", fixed_lr=fixed_lr))
        out.append(by_hand)
        if everywhere:   # the same parameters and gradients (the same seed)
            out.append(Case(id=f"peer_{peer_id}_built", spec=spec, params=params,
                            paths=("auto",), seed=by_hand.seed))
    return out


#: run by the session's conformance runner (conftest.py): one worker per framework
WORKER_CASES = _worker_cases()


@pytest.mark.parametrize("peer", PEERS, ids=[p[0] for p in PEERS])
def test_the_peer_is_a_spec_setting(worker_runs, peer):
    peer_id, qualified, *_ = peer
    if not _installed(qualified):
        pytest.skip(f"{qualified.split('.')[0]} is not installed")
    worker_runs.assert_passes(f"peer_{peer_id}", "torch", "hand")


@pytest.mark.parametrize("peer", [p for p in PEERS if p[-1]], ids=[p[0] for p in PEERS if p[-1]])
def test_the_spec_follows_the_peer_on_every_backend(worker_runs, peer):
    """Built on every backend, the spec follows the oracle; on torch it also follows the
    peer's own float32 trajectory (the peer's run as the target, the float32 references'
    distance from it as the floor)."""
    peer_id, qualified, kwargs, spec, params, *_ = peer
    if not _installed(qualified):
        pytest.skip(f"{qualified.split('.')[0]} is not installed")
    for fw in installed_frameworks():
        worker_runs.assert_passes(f"peer_{peer_id}_built", fw, "auto")
    case = next(c for c in WORKER_CASES if c.id == f"peer_{peer_id}")
    theirs = worker_runs.trajectory(f"peer_{peer_id}", "torch", "hand")
    ours = worker_runs.trajectory(f"peer_{peer_id}_built", "torch", "auto")
    followed = compare(ours, theirs, floor_trajectories(spec, case))
    assert followed.passed, followed.detail
