"""Every knob ``spec.alternatives()`` lists is visible on ``unified-opt check``'s streams
(issue 40): for each algorithm's default spec and each sample of ``algorithms.py``, the
float32 numpy run of every alternative, standing for an optimizer that computes it,
fails against the spec under the suite's rule, and the explainer names that knob. The
false passes the quiet streams and the oracle's machine epsilon fix, each shown.

Fast by construction: numpy only (no framework run per alternative), each stream's first
:data:`FIRST_STEPS` steps tried before whole streams (a comparison that fails on a
stream's first steps fails on the stream: :class:`.trajectory.FirstSteps`), and the
oracle, floors and explainer variants of a spec computed once for all its alternatives
(:class:`.verdict.References`).
"""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import ALGORITHMS
from conftest import require

import unified_opt as uo
from unified_opt.conformance.checker import STREAMS, check, check_cases
from unified_opt.conformance.compare import compare
from unified_opt.conformance.explainer import explain_failure
from unified_opt.conformance.gradients import (
    EPS_SIZED,
    QUIET_ZERO_STEPS,
    SMALL,
    SMALLER,
    gradients_at,
    quiet_gradients_at,
    quiet_role,
)
from unified_opt.conformance.trajectory import FirstSteps
from unified_opt.conformance.verdict import References

#: steps of each stream tried before whole streams (most knobs show at step 1)
FIRST_STEPS = 10


def _specs() -> list:
    """Each algorithm's default spec, then every sample of ``algorithms.py``, once."""
    out = []
    for name in uo.algorithms():
        for spec in (uo.get(name), *ALGORITHMS[name].samples):
            if spec not in out and spec.alternatives():
                out.append(spec)
    return out


SPECS = _specs()


def first_failure(spec, alternative, cases, references, state=False):
    """The first stream prefix (or, failing none, whole stream) on which the float32 run
    of ``alternative`` fails against ``spec``: ``(case, trajectory, comparison)``, or
    None. Compared on the lr and the parameters only, as ``check`` compares an optimizer
    whose state it cannot read (``state=True``: on the state too)."""
    for steps in (FIRST_STEPS, None):
        for case in cases:
            run_case = case if steps is None else FirstSteps(case, steps)
            run = references.of(alternative, run_case, "float32")
            comparison = compare(run, references.of(spec, run_case, "float64"),
                                 references.floors(spec, run_case), state=state)
            if not comparison.passed:
                return run_case, run, comparison
    return None


def named(description, alternative, matches, spec, run_case, references) -> bool:
    """Is ``description`` among the explainer's ``matches``, or another alternative of
    ``spec`` there that computes the alternative's numbers bit for bit on ``run_case``
    (the explainer lists one computation once)?"""
    if description in matches:
        return True
    expected = references.of(alternative, run_case, "float64").quantities()
    for text, other in spec.alternatives():
        if text in matches:
            found = references.of(other, run_case, "float64").quantities()
            if found.keys() == expected.keys() and all(
                    np.array_equal(found[k], expected[k], equal_nan=True) for k in found):
                return True
    return False


#: alternatives no check stream can show, and why
EXEMPT = {
    ("dgc_momentum", "rampup_begin_step"):
        "DGC sparsifies only tensors of min_numel elements or more (16384 by default); "
        "check's parameters have at most 4225, so the sparsity schedule never acts there "
        "(the conformance suite's DGC cases show it)",
}


@pytest.mark.parametrize("spec", SPECS, ids=[f"{s.name}-{i}" for i, s in enumerate(SPECS)])
def test_every_alternative_fails_the_check_streams_and_is_named(spec):
    cases = check_cases(spec, nonfinite=False)
    references = References()
    problems = []
    for description, alternative in spec.alternatives():
        if (spec.name, description.partition("=")[0]) in EXEMPT and \
                spec.min_numel > max(int(np.prod(s)) for s in cases[0].params.values()):
            continue
        found = first_failure(spec, alternative, cases, references)
        if found is None:
            problems.append(f"{description}: passes every check stream")
            continue
        run_case, run, comparison = found
        explained = explain_failure(run, run_case, spec, reference=references.of,
                                    state=False)
        if not named(description, alternative, explained["matches"], spec, run_case,
                     references):
            problems.append(f"{description}: fails {run_case.id} at step "
                            f"{comparison.first_failing_step}, explained as "
                            f"{explained['text']!r}")
    assert not problems, f"{spec}:\n  " + "\n  ".join(problems)
    assert_quiet_stream_stable(spec, cases, references)


STATE_SPECS = list(dict.fromkeys(
    s for n in uo.algorithms() for s in (uo.get(n), *ALGORITHMS[n].samples)
    if s.state_alternatives()))


@pytest.mark.parametrize("spec", STATE_SPECS,
                         ids=[f"{s.name}-{i}" for i, s in enumerate(STATE_SPECS)])
def test_every_state_alternative_moves_the_state_alone_and_is_named_there(spec):
    """A state alternative (the lr on the other side of a momentum buffer under a
    constant lr) passes on the parameters, fails on the state, and the explainer names
    it where the state was read."""
    cases = check_cases(spec, nonfinite=False)
    references = References()
    for description, alternative in spec.state_alternatives():
        assert first_failure(spec, alternative, cases, references) is None, description
        found = first_failure(spec, alternative, cases, references, state=True)
        assert found is not None, f"{description}: passes on the state too"
        run_case, run, comparison = found
        assert comparison.failing_quantity.startswith("state:"), comparison.failing_quantity
        explained = explain_failure(run, run_case, spec, reference=references.of, state=True)
        assert description in explained["matches"], (description, explained["text"])


def test_state_alternatives_cover_the_momentum_buffers_with_the_lr_inside():
    assert {s.name for s in STATE_SPECS} == {"sgd", "lars", "rmsprop"}
    # lr 1: the buffers are the same; no momentum: no buffer; a schedule: a knob
    assert not uo.SGD(lr=1.0, momentum=0.9).state_alternatives()
    assert not uo.SGD(lr=0.1).state_alternatives()
    scheduled = uo.SGD(lr=uo.schedules.Cosine(lr=0.1, T_max=10), momentum=0.9)
    assert not scheduled.state_alternatives() and any(
        d.startswith("lr_placement=") for d, _ in scheduled.alternatives())


def test_the_specs_cover_every_algorithm_with_alternatives():
    covered = {s.name for s in SPECS}
    listing = {name for name in uo.algorithms()
               if any(s.alternatives() for s in (uo.get(name), *ALGORITHMS[name].samples))}
    assert covered == listing and len(covered) >= 12


def assert_quiet_stream_stable(spec, cases, references):
    """The quiet stream is no false failure: the spec's own float32 run passes it
    (NaN/Inf positions included)."""
    for case in cases:
        if "quiet" in case.id:
            assert references.stable(case), (spec, case.id)


def test_a_correct_float32_run_passes_the_quiet_stream_without_alternatives():
    """The specs the registry test leaves out (no alternatives), and Adafactor clamping
    at eps[0]=1e-30, whose square is 0 in float32: torch.optim.Adafactor(eps=(1e-30,
    1e-3)) turns a tensor NaN whose gradients were all 0 from step 0, or, factored, near
    1e-20 (the float64 oracle clamps at 1e-60 and stays finite), so the quiet stream has
    neither."""
    specs = [s for n in uo.algorithms() for s in (uo.get(n), *ALGORITHMS[n].samples)
             if not s.alternatives()]
    assert {s.name for s in specs} >= {"adagrad", "adadelta", "rprop", "lion"}
    for spec in specs + [uo.Adafactor(lr=0.01, eps=(1e-30, 1e-3))]:
        assert_quiet_stream_stable(spec, check_cases(spec, nonfinite=False), References())


# -- the streams ------------------------------------------------------------------------
def test_the_quiet_stream_has_small_histories_and_a_normal_first_step():
    case = [c for c in check_cases(uo.Adam(), nonfinite=False) if "quiet" in c.id][0]
    roles = {name: quiet_role(i) for i, name in enumerate(case.params)}
    assert roles == {"w": "small", "bias": "cycle", "ln.gamma": "smaller",
                     "ln.beta": "zeros", "w3d": "eps_sized", "scale": "smaller",
                     "conv": "small"}
    steps = [case.gradients(t) for t in range(case.steps)]
    for name, role in roles.items():
        peak = max(float(np.abs(g[name]).max()) for g in steps)
        if role == "eps_sized":
            assert 1e-9 < peak < 1e-7
        elif role == "small":
            assert 1e-13 < peak < 1e-11
        elif role == "smaller":
            assert 1e-21 < peak < 1e-19
    assert all(not g["ln.beta"].any() for g in steps[1:QUIET_ZERO_STEPS + 1])
    for normal in (steps[0]["ln.beta"], steps[QUIET_ZERO_STEPS + 1]["ln.beta"],
                   steps[0]["bias"]):                # normal-sized: first-step rules show
        assert 0.1 < float(np.abs(normal).max()) < 10.0
    assert (EPS_SIZED, SMALL, SMALLER) == (1e-8, 1e-12, 1e-20)
    # deterministic: values depend on (seed, step, position) only
    again = quiet_gradients_at(case.seed, 7, case.params, 0)
    assert all(np.array_equal(again[n], steps[7][n]) for n in case.params)
    assert not np.array_equal(gradients_at(case.seed, 7, case.params)["w"], again["w"])
    assert STREAMS == 4 and sum("quiet" in c.id for c in check_cases(uo.Adam())) == 1


@pytest.mark.parametrize("spec", [uo.Adafactor(lr=0.01), uo.CAME(lr=0.01)],
                         ids=["adafactor", "came"])
def test_a_factored_tensor_s_quiet_gradients_stay_where_float32_holds_its_moment(spec):
    """torch's Adafactor multiplies the row and column means (each about g^2) before it
    divides: for g near 1e-12 that is 1e-48, 0 in float32, and with eps=(1e-30, ...) an
    infinite 1/sqrt(V), then NaN, where the oracle is finite (a false alarm of the
    check). A tensor the spec factors gets 1e-8 where its role is smaller; a 1-D one
    keeps 1e-20."""
    case = [c for c in check_cases(spec, nonfinite=False) if "quiet" in c.id][0]
    assert spec.smallest_float32_gradient((65, 65)) == pytest.approx(3.3e-10, rel=0.01)
    assert spec.smallest_float32_gradient((8,)) == 0.0 == uo.Adam().smallest_float32_gradient(
        (65, 65))
    assert float(np.float32(spec.smallest_float32_gradient((2, 2))) ** 4) > 0
    steps = [case.gradients(t) for t in range(case.steps)]
    peak = {name: max(float(np.abs(g[name]).max()) for g in steps) for name in case.params}
    assert 1e-9 < peak["w"] < 1e-7 and 1e-9 < peak["conv"] < 1e-7   # "small" lifted
    assert 1e-9 < peak["w3d"] < 1e-7                                  # "eps_sized" kept
    assert 1e-21 < peak["ln.gamma"] < 1e-19 and 1e-21 < peak["scale"] < 1e-19
    adam = [c for c in check_cases(uo.Adam(), nonfinite=False) if "quiet" in c.id][0]
    assert 1e-13 < float(np.abs(adam.gradients(3)["w"]).max()) < 1e-11


# -- the oracle's machine epsilon -------------------------------------------------------
def test_the_machine_epsilon_follows_the_parameters_dtype():
    """Adafactor's eps[0]=None: the float64 oracle of float32 parameters clamps at
    float32's eps, as torch does on them; float64 parameters keep float64's."""
    spec = uo.Adafactor(lr=0.01)
    grads = {"w": np.full(4, 1e-12, dtype=np.float32)}
    moved = {}
    for dtype in (np.float32, np.float64):
        ref = uo.reference(spec, {"w": np.ones(4, dtype=dtype)}, dtype="float64")
        ref.step({"w": grads["w"].astype(dtype)})
        moved[dtype] = 1.0 - float(ref.params["w"][0])
    # clamp at eps^2: g / sqrt(max(g^2, eps^2)) = 1e-12 / eps, then scaled by 0.01
    assert moved[np.float32] == pytest.approx(0.01 * 1e-12 / np.finfo(np.float32).eps,
                                              rel=1e-9)
    assert moved[np.float64] == pytest.approx(0.01, rel=1e-9)   # no clamp: U = 1
    bf16 = uo.reference(spec, {"w": np.ones(4, dtype=np.float32)}, dtype="float64",
                        storage="bfloat16")
    bf16.step(grads)
    assert 1.0 - float(bf16.params["w"][0]) < 1e-5   # float32's eps, the math dtype


def test_adafactor_machine_eps_add_and_clamp_part_in_float32():
    """False pass (c): eps=(None, ...) 'add' against 'clamp' on float32 parameters. The
    float64 oracle took float64's 2.2e-16; every float32 run then differs from it by
    float32's eps, and the floor hid 'add' (5.6 floors on the quiet stream)."""
    spec = uo.Adafactor(lr=0.01)
    add = spec.replace(eps_mode="add")
    cases = check_cases(spec, nonfinite=False)
    references = References()
    found = first_failure(spec, add, cases, references)
    assert found is not None
    run_case, run, comparison = found
    assert comparison.worst_ratio > 8.0    # K: the rule's multiple of the floor
    assert "eps_mode='add'" in explain_failure(run, run_case, spec, reference=references.of,
                                               state=False)["matches"]


def test_adafactor_eps_mode_with_eps1_1e30_is_visible():
    """False pass (b): eps_mode='clamp' against an 'add' optimizer with eps[0]=1e-30
    passed the adversarial streams; a 1-D tensor of 1e-20 gradients shows it."""
    spec = uo.Adafactor(lr=0.01, eps=(1e-30, 1e-3))
    add = spec.replace(eps_mode="add")
    cases = check_cases(spec, nonfinite=False)
    references = References()
    for case in cases:
        passed = compare(references.of(add, case, "float32"), references.of(
            spec, case, "float64"), references.floors(spec, case), state=False).passed
        assert passed == ("quiet" not in case.id), case.id
    quiet = cases[-1]
    run = references.of(add, quiet, "float32")
    explained = explain_failure(run, quiet, spec, reference=references.of, state=False)
    assert "eps_mode='add'" in explained["matches"]


# -- false pass (a): an eps in Lamb's trust-ratio denominator, a torch optimizer ---------
def torch_lamb_with_trust_eps(params, lr, weight_decay, eps=1e-6, betas=(0.9, 0.999)):
    """Paddle's Lamb with eps added to the trust ratio's denominator too
    (``pytorch_optimizer.Lamb``'s form), as a torch optimizer written by hand."""
    import torch

    class Lamb(torch.optim.Optimizer):
        @torch.no_grad()
        def step(self, closure=None):
            b1, b2 = betas
            for group in self.param_groups:
                for p in group["params"]:
                    state = self.state[p]
                    if not state:
                        state.update(step=0, exp_avg=torch.zeros_like(p),
                                     exp_avg_sq=torch.zeros_like(p))
                    state["step"] += 1
                    t, g = state["step"], p.grad
                    m = state["exp_avg"].mul_(b1).add_(g, alpha=1 - b1)
                    v = state["exp_avg_sq"].mul_(b2).addcmul_(g, g, value=1 - b2)
                    u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
                    u = u + p * weight_decay
                    w_norm = torch.linalg.vector_norm(p)
                    u_norm = torch.linalg.vector_norm(u)
                    ratio = torch.where((w_norm > 0) & (u_norm > 0),
                                        w_norm / (u_norm + eps), torch.ones_like(w_norm))
                    p.sub_(u * (group["lr"] * ratio))

    return Lamb(params, dict(lr=lr))


@require("torch")
def test_lamb_trust_eps_fails_the_check_and_is_named():
    """False pass (a): a Lamb adding eps to the trust ratio's denominator passed
    ``check`` against ``uo.Lamb(trust_eps=0)``: every stream started normal-sized. The
    quiet stream's small tensors show it, and the explainer finds the spec with the eps
    there."""
    hyper = dict(lr=1e-3, weight_decay=0.01)
    factory = lambda params: torch_lamb_with_trust_eps(params, **hyper)   # noqa: E731
    result = check(factory, uo.Lamb(**hyper, trust_eps=0.0), backend="torch",
                   nonfinite=False)
    assert not result.passed
    assert "_quiet_0: first failure at step" in result.explanation
    assert "trust_eps=1e-06 follows this optimizer; the spec has 0.0" in result.explanation
    failed = [r["case"] for r in result.report["results"] if r["status"] != "pass"]
    assert failed == ["check_lamb_quiet_0"]
