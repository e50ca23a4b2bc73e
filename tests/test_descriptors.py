"""The native-class descriptors and what the suite sees of them: every preset inverts its
lowerings (``from_native(to_native(spec)) == spec``), every knob a lowering mentions is
visible in a case the row builds, every case runs on the element counts where CPU
kernels switch code paths, and every algorithm has a non-finite-gradient case. Numpy
only: the descriptors import no framework."""

import inspect
import warnings

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.backend import BACKENDS, Context, load
from unified_opt.conformance.cases import KERNEL_SIZES, default_cases
from unified_opt.conformance.coverage import (
    alternatives,
    invisible_knobs,
    knobs,
    missing_sizes,
    row_cases,
)
from unified_opt.conformance.verdict import References
from unified_opt.native import without_name_rules
from unified_opt.ops import numpy_ops

CASES = default_cases()
ROWS = [(b, cls, lowering) for b in BACKENDS for cls, lowering in load(b).rows()]
ROW_IDS = [f"{b}:{cls.short_name}:{lowering.algorithm}" for b, cls, lowering in ROWS]

#: knobs that no case can show within its steps, and why
EXEMPT = {
    ("mindspore.nn.AdaFactor", "relative_step"):
        "with nn.AdaFactor's fixed cap the relative step min(1e-2, 1/sqrt(t)) equals the "
        "plain lr 1e-2 for the first 10^4 steps; the cap (lr) and warmup_init are visible",
    ("mindspore.nn.LARS", "zero_norm_rule", "'one_if_denominator_zero'"):
        "the ratio's denominator ||g|| + wd ||p|| + eps is 0 only with eps=0 and no decay, "
        "where float32 squares a 1e-30 gradient to 0 and float64 does not: no case shows "
        "it stably (the other rules are shown)",
    ("torch.optim.Muon", "ns_dtype"):
        "the rule judges a bfloat16 iteration within a bfloat16 ulp of its result per step, "
        "and a float32 iteration lands within a few of them (5.8 floors measured): the "
        "reverse, a bfloat16 iteration where the spec computes in float32, fails by 10^4 "
        "floors (Muon's planted deviations)",
    ("torch.optim.Muon", "others"):
        "the row takes matrices only, where every value computes the same; the cases "
        "muon_with_adamw* show it on the own path",
    ("torch.optim.Muon", "muon_params"):
        "the row takes matrices only, where every value computes the same; the cases "
        "muon_with_adamw* show it on the own path",
}


def _samples(cls, lowering):
    """Specs the lowering accepts: its cases' specs and the class's preset defaults."""
    specs = [c.spec for c in CASES if c.spec.name == lowering.algorithm]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # nn.RMSProp's preset warns about its CPU kernel
        specs.append(cls.from_native(**cls.example_arguments()))
    out = []
    for spec in specs:
        if spec.name != lowering.algorithm:
            continue
        spec = spec.replace(**without_name_rules(spec))
        if lowering.unmet(spec) or spec.varies_per_step() or spec.grad_clip is not None \
                or spec.loss_scale != 1.0 or spec.skip_nonfinite or spec.grad_centralization:
            continue   # the build lowers those around the class, not into its arguments
        out.append(spec)
    return out


@pytest.mark.parametrize("backend, cls, lowering", ROWS, ids=ROW_IDS)
def test_the_preset_inverts_the_lowering(backend, cls, lowering):
    samples = _samples(cls, lowering)
    assert samples, f"no spec to check {cls.name} with"
    for spec in samples:
        back = cls.round_trip(lowering, spec)
        assert back.canonical() == spec.canonical(), (
            f"{cls.name}: {spec} read back as {back} "
            f"(native call {cls.native_call(lowering, spec)})")


def test_a_planted_wrong_preset_breaks_the_round_trip():
    """The property has power: a preset that reads eps back as another placement fails."""
    cls = load("torch").native_class("torch.optim.Adam")
    lowering = cls.lowerings[0]
    spec = uo.Adam(lr=0.01, eps=1e-3)
    assert cls.round_trip(lowering, spec) == spec
    wrong = type(cls)(name=cls.name, from_native=lambda **kw: uo.Adam(
        lr=kw["lr"], eps=kw["eps"], eps_placement="eps_hat"), lowerings=cls.lowerings)
    assert wrong.round_trip(lowering, spec) != spec


def test_every_descriptor_is_complete():
    for backend in BACKENDS:
        names = [cls.name for cls in load(backend).classes]
        assert len(names) == len(set(names)), f"{backend}: a class described twice"
        for cls in load(backend).classes:
            if cls.refused:
                continue
            params = inspect.signature(cls.from_native).parameters
            if cls.lr_keyword:
                assert cls.lr_keyword in params, (cls.name, cls.lr_keyword)
            states = set()
            for lowering in cls.lowerings:
                assert lowering.algorithm in uo.algorithms(), (cls.name, lowering.algorithm)
                states |= {name for spec in _samples(cls, lowering) for shape in ((3, 4), (5,))
                           for name in spec.init(np.zeros(shape), numpy_ops)}
            assert set(cls.state) <= states, (cls.name, set(cls.state) - states)
            assert cls.lowerings or cls.not_lowered, f"{cls.name}: say why it is not lowered"


@pytest.mark.slow
def test_every_row_knob_is_visible_in_a_case_the_row_builds():
    references = References()
    invisible = {}
    for backend in BACKENDS:
        invisible.update({f"{backend}: {k}": v for k, v in invisible_knobs(
            load(backend), CASES, references, EXEMPT).items()})
    assert not invisible, "\n".join(f"{k}\n  " + "\n  ".join(v) for k, v in invisible.items())


def test_the_visibility_check_has_power():
    """Before the RMSProp fix the suite had no case showing MindSpore's nn.RMSProp eps on
    a tensor of 8+ elements; the check flags a row whose only case hides a knob."""
    backend = load("torch")
    cls = backend.native_class("torch.optim.Adam")
    lowering = cls.lowerings[0]
    weak = [c for c in CASES if c.id == "preset_torch_adam"][0]
    weak = weak.__class__(id="weak_eps", spec=weak.spec.replace(eps=1e-12), params=weak.params)
    assert row_cases(backend, cls, lowering, [weak]) == [weak]
    assert "eps" in knobs(lowering, [weak])
    found = invisible_knobs(backend, [weak])["torch.optim.Adam (adam)"]
    assert any(line.startswith("eps (moved)") for line in found), found


def test_alternatives_flip_move_and_choose():
    spec = uo.Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-3, amsgrad=False)
    assert alternatives(spec, "amsgrad", []) == [("flip", True)]
    assert alternatives(spec, "eps", []) == [("moved", 1.5e-3)]
    assert [k for k, _ in alternatives(spec, "betas", [])] == ["moved[0]", "moved[1]"]
    assert alternatives(spec, "eps_placement", ["outside", "inside"]) == [("'inside'", "inside")]


def test_every_case_covers_the_kernel_sizes():
    for case in CASES:
        assert not missing_sizes(case, KERNEL_SIZES), (case.id, case.params)


def test_every_algorithm_has_a_nonfinite_gradient_case():
    for name in uo.algorithms():
        mine = [c for c in CASES if c.spec.name == name and c.nonfinite_steps
                and not c.spec.skip_nonfinite]
        assert mine, f"no non-finite gradient case for {name}"


def test_mindspore_rmsprop_row_and_preset_follow_the_cpu_kernel():
    """nn.RMSProp's CPU kernel puts eps outside the sqrt in its vector blocks and inside
    in the scalar tails (measured): non-centered with eps it is not the spec's."""
    with pytest.warns(UserWarning, match="does not compute its documented formula"):
        spec = uo.preset("mindspore.nn.RMSProp", learning_rate=0.01, momentum=0.9,
                         epsilon=1e-3)
    assert spec.eps_placement == "inside"   # the documented formula
    decision = load("mindspore").decide(spec, "auto", Context())
    assert decision.path == "own" and "centered=True or eps=0" in str(decision)
    centered = load("mindspore").decide(spec.replace(centered=True), "auto", Context())
    assert centered.native == "mindspore.nn.RMSProp"
