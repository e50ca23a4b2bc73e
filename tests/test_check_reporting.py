"""``check`` says what it compared and writes what it promises (issue 40): a factory's
state kept under the spec's names less its keepdims axes, beside extra keys, is mapped
and compared (CAME's factors in came-pytorch and pytorch-optimizer, pytorch-optimizer's
AdaFactor); what cannot be mapped is said; the PASS/FAIL line lists what was compared;
a failing check's ``--out`` holds its trajectories; equal explanations are said once."""

import json

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.cli import main
from unified_opt.conformance import explainer
from unified_opt.conformance.checker import check, check_cases, what_was_compared
from unified_opt.conformance.drivers.base import map_state, spec_state_shapes
from unified_opt.conformance.trajectory import Trajectory, reference_trajectory
from unified_opt.conformance.verdict import References

CAME = uo.CAME(lr=0.01, weight_decay=0.1)


def test_map_state_reads_factors_kept_without_keepdims_and_ignores_extra_keys():
    # came-pytorch's layout of a (4, 3) and a (2, 3, 4) parameter (measured: one step)
    for shape, held in [((4, 3), {"exp_avg": (4, 3), "exp_avg_sq_row": (4,),
                                  "exp_avg_sq_col": (3,), "exp_avg_res_row": (4,),
                                  "exp_avg_res_col": (3,), "RMS": ()}),
                        ((2, 3, 4), {"exp_avg": (2, 3, 4), "exp_avg_sq_row": (2, 3),
                                     "exp_avg_sq_col": (2, 4), "exp_avg_res_row": (2, 3),
                                     "exp_avg_res_col": (2, 4), "RMS": ()})]:
        wanted = spec_state_shapes(CAME, shape)
        mapped = map_state(wanted, held, [*held, "step"])
        assert mapped.unmapped == ""
        assert set(mapped.names) == set(wanted)
        assert mapped.reshaped == {k: (held[k], wanted[k]) for k in wanted if k != "exp_avg"}
        assert mapped.ignored == ("RMS", "step")
    # a 1-D parameter keeps its second moment whole: nothing reshaped
    one = map_state(spec_state_shapes(CAME, (5,)), {"exp_avg": (5,), "exp_avg_sq": (5,)},
                    ["exp_avg", "exp_avg_sq", "RMS", "step"])
    assert one.reshaped == {} and one.unmapped == "" and one.ignored == ("RMS", "step")
    # pytorch-optimizer's AdaFactor keeps a first moment the spec (beta1=None) has not
    adafactor = map_state(spec_state_shapes(uo.Adafactor(lr=0.01), (4, 3)),
                          {"exp_avg": (4, 3), "exp_avg_sq_row": (4,), "exp_avg_sq_col": (3,)},
                          ["RMS", "exp_avg", "exp_avg_sq_row", "exp_avg_sq_col"])
    assert adafactor.unmapped == "" and adafactor.ignored == ("RMS", "exp_avg")


def test_map_state_says_what_cannot_be_mapped():
    wanted = spec_state_shapes(CAME, (4, 3))
    # torch.optim.Adafactor's names (row_var) are no keepdims difference: its state is
    # read through its descriptor, not mapped
    other_names = map_state({"exp_avg_sq_row": (4, 1)}, {"row_var": (4, 1)},
                            ["step", "row_var"])
    assert other_names.unmapped == ("no exp_avg_sq_row (the optimizer's state holds step, "
                                    "row_var)")
    transposed = map_state(wanted, {**{k: s for k, s in wanted.items()},
                                    "exp_avg_sq_row": (3,)}, list(wanted))
    assert transposed.unmapped.startswith("exp_avg_sq_row of shape (3,), the spec's is (4, 1)")
    flattened = map_state({"exp_avg": (4, 3)}, {"exp_avg": (12,)}, ["exp_avg"])
    assert "exp_avg of shape (12,)" in flattened.unmapped   # not a keepdims difference
    nothing = map_state({"exp_avg": (4, 3)}, {}, [])
    assert nothing.unmapped == "no exp_avg (the optimizer's state holds nothing)"


@require("torch")
def test_the_peers_state_layouts_are_the_ones_mapped():
    """The layouts above, read from the peers themselves after one step."""
    import torch

    peers = []
    for module, name, kwargs, spec in [
            ("came_pytorch", "CAME", {}, CAME),
            ("pytorch_optimizer", "CAME", {"foreach": False}, CAME),
            ("pytorch_optimizer", "AdaFactor", {}, uo.Adafactor(lr=0.01, beta1=0.9))]:
        found = pytest.importorskip(module)
        peers.append((getattr(found, name), kwargs, spec))
    for cls, kwargs, spec in peers:
        params = [torch.nn.Parameter(torch.ones(s)) for s in [(4, 3), (5,), (2, 3, 4)]]
        optimizer = cls(params, lr=0.01, **kwargs)
        for p in params:
            p.grad = torch.full_like(p, 0.5)
        optimizer.step()
        for p in params:
            held = optimizer.state[p]
            mapped = map_state(spec_state_shapes(spec, tuple(p.shape)),
                               {k: tuple(v.shape) for k, v in held.items()
                                if isinstance(v, torch.Tensor)}, [str(k) for k in held])
            assert mapped.unmapped == "", (cls, p.shape, mapped)
            assert "RMS" in mapped.ignored
            assert bool(mapped.reshaped) == (p.dim() > 1)


def test_what_every_stream_compared_is_what_is_said():
    def result(status, compared, state=(), **lists):
        return {"status": status, "compared": compared, "compared_state": list(state),
                **lists}

    both = [result("pass", ["params", "lr", "state"], ["exp_avg"], state_ignored=["step"]),
            result("fail", ["params", "lr", "state"], ["exp_avg"], state_ignored=["step"]),
            result("error", ["params"])]      # a stream that raised compared nothing
    assert what_was_compared(both) == {"compared": ["params", "lr", "state exp_avg"],
                                       "not_compared": [], "state_reshaped": [],
                                       "state_ignored": ["step"], "state_negated": []}
    no_lr = [result("pass", ["params", "lr"]),
             result("pass", ["params"], not_compared=["lr (none)"])]
    assert what_was_compared(no_lr)["compared"] == ["params"]
    assert what_was_compared(no_lr)["not_compared"] == ["lr (none)"]
    assert what_was_compared([result("error", ["params"])])["compared"] == []


@require("torch")
def test_torch_adafactor_state_is_read_through_its_descriptor():
    """torch.optim.Adafactor keeps row_var/col_var (keepdims) and variance: its
    descriptor maps them; nothing is reshaped or ignored by the check's mapping."""
    import torch

    result = check(lambda p: torch.optim.Adafactor(p, lr=0.01),
                   uo.preset("torch.optim.Adafactor", lr=0.01), backend="torch",
                   nonfinite=False)
    assert result.passed, str(result)
    assert result.compared == ("params", "lr", "state exp_avg_sq_row",
                               "state exp_avg_sq_col", "state exp_avg_sq")
    assert result.state_reshaped == () and result.state_ignored == ()


def _perturbed_came(factor):
    """came-pytorch's CAME whose row factor is off by ``factor`` after every step: the
    update reads the row factor over its mean, so the parameters do not show it at the
    step it happens; only the state comparison does."""
    import came_pytorch

    class PerturbedRow(came_pytorch.CAME):
        def step(self, closure=None):
            loss = super().step(closure)
            for state in self.state.values():
                if "exp_avg_sq_row" in state:
                    state["exp_avg_sq_row"].mul_(factor)
            return loss

    return lambda params: PerturbedRow(params, lr=0.01, weight_decay=0.1)


def test_came_pytorch_state_is_compared_and_a_planted_state_error_is_caught():
    pytest.importorskip("came_pytorch")
    good = check(_perturbed_came(1.0), CAME, backend="torch", nonfinite=False)
    assert good.passed, str(good)
    line = str(good).splitlines()
    assert line[0].startswith("PASS: ")
    assert line[0].endswith("(compared: params, lr, state exp_avg, exp_avg_sq_row, "
                            "exp_avg_sq_col, exp_avg_res_row, exp_avg_res_col, exp_avg_sq)")
    assert line[1] == ("state mapped onto the spec's names: exp_avg_sq_row, exp_avg_sq_col, "
                       "exp_avg_res_row, exp_avg_res_col read from arrays kept without their "
                       "keepdims axes; ignored: RMS, step (no state of the spec)")
    assert good.not_compared == () and good.state_ignored == ("RMS", "step")
    assert good.report["checked"]["state_reshaped"] == list(good.state_reshaped)
    assert all(r["compared_state"] for r in good.report["results"])
    planted = check(_perturbed_came(1.5), CAME, backend="torch", nonfinite=False)
    assert not planted.passed
    first = min((r for r in planted.report["results"] if r["status"] == "fail"),
                key=lambda r: r["comparison"]["first_failing_step"])["comparison"]
    assert first["first_failing_step"] == 1
    assert first["failing_quantity"].startswith("state:")
    assert first["failing_quantity"].endswith(":exp_avg_sq_row")
    assert "first failure at step 1: state:" in planted.explanation


HAND_SGD = """\
import torch


class RenamedSGD(torch.optim.Optimizer):
    '''Momentum SGD keeping its buffer as "buf" and its lr as "learning_rate".'''

    def __init__(self, params, learning_rate, momentum):
        super().__init__(params, {"learning_rate": learning_rate, "momentum": momentum})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = p.grad.clone()
                else:
                    state["buf"].mul_(group["momentum"]).add_(p.grad)
                p.add_(state["buf"], alpha=-group["learning_rate"])


def renamed(params):
    return RenamedSGD(params, learning_rate=0.05, momentum=0.9)


def renamed_off(params):
    return RenamedSGD(params, learning_rate=0.05, momentum=0.8)
"""


@require("torch")
def test_what_is_not_compared_is_said(tmp_path, monkeypatch, capsys):
    (tmp_path / "hand_sgd.py").write_text(HAND_SGD)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["check", "hand_sgd:renamed", "--spec", "sgd(lr=0.05, momentum=0.9)",
                 "--backend", "torch", "--finite-only"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].startswith("PASS: ")
    assert printed[1].endswith(
        "(compared: params; not compared: lr (the optimizer exposes none: torch "
        "param_groups, Paddle and MindSpore get_lr()); state (w: no momentum_buffer (the "
        "optimizer's state holds buf)))")


@require("torch")
def test_a_failing_check_writes_its_trajectories_under_out(tmp_path, monkeypatch, capsys):
    (tmp_path / "hand_sgd.py").write_text(HAND_SGD)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "report"
    assert main(["check", "hand_sgd:renamed_off", "--spec", "sgd(lr=0.05, momentum=0.9)",
                 "--backend", "torch", "--finite-only", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "FAIL: 0 of " in printed and f"trajectories: {out}/trajectories/torch/" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "complete"
    failing = [r for r in report["results"] if r["status"] == "fail"]
    assert failing and len(failing) == len(report["results"])
    for result in failing:
        name = f"trajectories/torch/{result['case']}__check.npz"
        assert result["trajectory"] == name
        trajectory = Trajectory.load(out / name)
        assert trajectory.steps == 50 and set(trajectory.params) == {
            "w", "bias", "ln.gamma", "ln.beta", "w3d", "scale", "conv"}
        # the recorded parameters are the optimizer's: momentum 0.8 at step 2
        case = next(c for c in check_cases(uo.SGD(lr=0.05, momentum=0.9), nonfinite=False,
                                           backend="torch") if c.id == result["case"])
        grads = [case.gradients(t)["bias"] for t in range(2)]
        start = case.initial_params()["bias"].astype(np.float64)
        expected = start - 0.05 * grads[0] - 0.05 * (0.8 * grads[0] + grads[1])
        np.testing.assert_allclose(trajectory.params["bias"][1], expected, rtol=1e-5,
                                   atol=1e-6)
    assert report["backends"]["torch"]["trajectories_dropped"] == []
    # a passing check into the same folder leaves none of the failing one's files
    assert main(["check", "hand_sgd:renamed", "--spec", "sgd(lr=0.05, momentum=0.9)",
                 "--backend", "torch", "--finite-only", "--out", str(out)]) == 0
    assert not (out / "trajectories").exists()
    assert "trajectories:" not in capsys.readouterr().out


def test_equal_explanations_are_said_once():
    """AdamW's "coupled L2 weight decay (Adam)" alternative and the coupled-decay slip
    are one computation: a trajectory that follows it is explained once."""
    spec = uo.AdamW(lr=0.01, eps=1e-3, weight_decay=0.1)
    case = check_cases(spec, nonfinite=False)[0]
    adam = dict(explainer.variants(spec, case))["coupled L2 weight decay (Adam)"]
    followed = reference_trajectory(adam, case, "float32")
    references = References()
    found = explainer.explain_failure(followed, case, reference=references.of)
    assert found["matches"] == ["coupled L2 weight decay (Adam)"]
    assert found["text"] == "coupled L2 weight decay (Adam) follows this optimizer"


def test_first_steps_and_canonical_skips_keep_the_matches():
    """Candidates judged on the first steps first, and specs equal to the claimed one
    skipped, give the matches of judging every candidate on the whole run."""
    spec = uo.Lamb(lr=0.01, weight_decay=0.01)
    case = check_cases(spec, nonfinite=False)[0]
    candidates = explainer.variants(spec, case)
    coupled = next(v for d, v in candidates if d.startswith("the weight decay coupled"))
    followed = reference_trajectory(coupled, case, "float32")
    references = References()
    asked = []

    def reference(s, c, dtype, *args):
        asked.append((s, c.steps))
        return references.of(s, c, dtype, *args)

    fast = explainer.matching(followed, case, candidates, reference=reference,
                              first_steps=6, claimed=spec)
    slow = explainer.matching(followed, case, candidates, reference=references.of)
    assert fast == slow and len(fast) >= 1
    # always_adapt=True is Lamb's canonical form with decay: never run
    assert not any(isinstance(s, uo.Spec) and s.always_adapt and not spec.always_adapt
                   and s.canonical() == spec.canonical() for s, _ in asked)
    # most candidates ran 6 steps only
    assert sum(steps == 6 for _, steps in asked) > sum(steps == 50 for _, steps in asked)
