"""uo optimizers under the engines' data parallelism, 2 ranks on CPU: torch
``DistributedDataParallel`` (torchrun, gloo), torch's ``ZeroRedundancyOptimizer`` (each
rank steps its share of the parameters with ``uo.optimizer_factory(spec)`` as the local
optimizer) and ``paddle.DataParallel`` (``paddle.distributed.launch``). Each rank has
its own seeded adversarial gradient stream; the engine averages them during
``backward``; the uo optimizer steps on the average. For MindFormers' CAME (own path on
both), Lamb (own on torch, ``paddle.optimizer.Lamb`` on Paddle) and AdamW (native; with
a cosine schedule, constant under ZeRO), every rank's parameters and lr at every step
pass the conformance rule against a single-process ``uo.reference`` over the averaged
gradients, and the ranks agree bit for bit. Under FSDP2 ``fully_shard`` (DTensor
parameters, each rank holding half the rows; each rank records the gathered
parameters) all three follow the reference too: the own path's
norms, trust ratios and factored moments reduce across the shards. So does the gradient
pre-step there (loss scale, a non-finite gradient planted in rank 0's shard only, which
both ranks skip, and a global-norm clip), on Lamb's own path and AdamW's native one."""

import dataclasses
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import installed_frameworks

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.compare import compare
from unified_opt.conformance.distributed import launch_environment, launcher
from unified_opt.conformance.trajectory import Recorder, Trajectory, floor_trajectories
from unified_opt.ops import numpy_ops
from unified_opt.reference import Reference

RANK_SCRIPT = Path(__file__).parent / "dp_rank.py"
FRAMEWORKS = [f for f in ("torch", "paddle") if f in installed_frameworks()]
#: module attribute names cannot hold dots: the dense parameters without the norms
PARAMS = {"w": (65, 65), "bias": (7,), "w3d": (4, 4, 4), "scale": (1,)}
CASES = [
    Case(id="dp_came", params=PARAMS, seed=21,
         spec=uo.preset("mindformers.core.Came", learning_rate=1e-3, weight_decay=0.01)),
    Case(id="dp_lamb", params=PARAMS, seed=22, spec=uo.Lamb(lr=0.01, weight_decay=0.01)),
    Case(id="dp_adamw", params=PARAMS, seed=23,
         spec=uo.AdamW(lr=uo.schedules.Cosine(lr=0.01, T_max=50), weight_decay=0.05)),
]
#: FSDP2 with the gradient pre-step: the planted non-finite element 0 is in rank 0's shard
PRE_STEP = dict(loss_scale=4.0, skip_nonfinite=True, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0))
SHARDED_PRE_STEP_CASES = [
    Case(id="dp_lamb_pre_step", params=PARAMS, seed=25, nonfinite_steps=(5, 17),
         spec=uo.Lamb(lr=0.01, weight_decay=0.01, **PRE_STEP)),
    Case(id="dp_adamw_pre_step", params=PARAMS, seed=26, nonfinite_steps=(5, 17),
         spec=uo.AdamW(lr=0.01, weight_decay=0.05, **PRE_STEP)),
]
#: under ZeroRedundancyOptimizer a torch scheduler drives the wrapper's lr: constant here
ZERO_CASES = CASES[:2] + [Case(id="dp_adamw_constant", params=PARAMS, seed=24,
                               spec=uo.AdamW(lr=0.01, weight_decay=0.05))]
RUNS = {"torch": [("ddp", c) for c in CASES] + [("zero", c) for c in ZERO_CASES]
        + [("fsdp", c) for c in CASES + SHARDED_PRE_STEP_CASES],
        "paddle": [("ddp", c) for c in CASES]}
RANKS = 2


def averaged_trajectory(spec, case, dtype="float64", ops=numpy_ops):
    """The single-process reference over the ranks' averaged gradients."""
    streams = [dataclasses.replace(case, seed=case.seed + r) for r in range(RANKS)]
    ref = Reference(spec, case.initial_params(), dtype, ops=ops)
    recorder = Recorder()
    for t in range(case.steps):
        grads = [s.gradients(t) for s in streams]
        lr = ref.step({n: sum(g[n].astype(np.float64) for g in grads) / RANKS
                       for n in case.params})
        recorder.add(lr, ref.params, {})
    return recorder.trajectory()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dp")
    processes = {}
    for framework in FRAMEWORKS:
        out = root / framework
        out.mkdir()
        job = out / "job.json"
        job.write_text(json.dumps({"runs": [(e, c.to_dict()) for e, c in RUNS[framework]]}))
        processes[framework] = subprocess.Popen(
            launcher(framework, RANKS, out / "logs")
            + [str(RANK_SCRIPT), framework, str(job), str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=launch_environment())
    for framework, process in processes.items():
        text, _ = process.communicate(timeout=600)
        logs = "".join(p.read_text(errors="replace")
                       for p in sorted((root / framework).glob("logs/*")))
        assert process.returncode == 0, f"{framework}:\n{text[-3000:]}{logs[-3000:]}"
    return root


@pytest.mark.parametrize("framework, engine, case", [
    (f, e, c) for f in FRAMEWORKS for e, c in RUNS[f]],
    ids=[f"{f}-{e}-{c.id}" for f in FRAMEWORKS for e, c in RUNS[f]])
def test_every_rank_follows_the_reference_over_the_averaged_gradients(runs, framework,
                                                                      engine, case):
    oracle = averaged_trajectory(case.spec, case)
    floors = floor_trajectories(case.spec, case, averaged_trajectory)
    first = Trajectory.load(runs / framework / f"{case.id}.{engine}.rank0.npz")
    for rank in range(RANKS):
        run = Trajectory.load(runs / framework / f"{case.id}.{engine}.rank{rank}.npz")
        result = compare(run, oracle, floors, state=False)
        assert result.passed, f"{framework} {engine} rank {rank}, {case.id}: {result.detail}"
        if engine == "fsdp":          # each rank records the gathered parameters: no check
            continue
        for name in case.params:
            np.testing.assert_array_equal(run.params[name], first.params[name])


def test_the_planted_non_finite_gradient_is_in_one_shard_and_skipped():
    """The pre-step cases test what they claim: at each planted step one gradient's
    element 0 (rank 0's rows under fully_shard) is the only non-finite value, and the
    reference skips the step (its parameters do not move)."""
    for case in SHARDED_PRE_STEP_CASES:
        oracle = averaged_trajectory(case.spec, case)
        for step in case.nonfinite_steps:
            flat = np.concatenate([g.reshape(-1)[1:] for g in case.gradients(step).values()])
            firsts = [g.reshape(-1)[0] for g in case.gradients(step).values() if g.size]
            assert np.isfinite(flat).all() and sum(not np.isfinite(f) for f in firsts) == 1
            for name in case.params:
                np.testing.assert_array_equal(oracle.params[name][step],
                                              oracle.params[name][step - 1])


def test_the_paths_are_what_the_docstring_says():
    """As the ranks' ``uo.build`` decides (``prefer="speed"``) at these parameters' size:
    ``uo.explain(spec)`` alone reads the speed table's large class."""
    from unified_opt.backend import Context, load, total_elements

    expected = {"torch": ["own", "own", "native"], "paddle": ["own", "native", "native"]}
    for framework in FRAMEWORKS:
        context = Context(elements=total_elements(
            [(n, np.zeros(shape)) for n, shape in PARAMS.items()]))
        paths = [load(framework).decide(c.spec, "auto", context, "speed").path for c in CASES]
        assert paths == expected[framework], (framework, paths)


def test_the_factory_refuses_hyperparameters_outside_the_spec():
    torch = pytest.importorskip("torch")
    make = uo.optimizer_factory(uo.Lamb())
    p = torch.nn.Parameter(torch.zeros(3))
    assert uo.explain(make([{"params": [p]}])).algorithm == "lamb"
    with pytest.raises(ValueError, match=r"\['lr'\] given to the optimizer class"):
        make([p], lr=0.1)
    with pytest.raises(ValueError, match=r"parameter groups with \['weight_decay'\]"):
        make([{"params": [p], "weight_decay": 0.0}])
    with pytest.raises(TypeError, match="spec must be a unified_opt spec"):
        uo.optimizer_factory("lamb")


@pytest.mark.parametrize("spec", [uo.Lamb(grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)),
                                  uo.AdamW(skip_nonfinite=True)], ids=["clip", "skip"])
def test_the_factory_refuses_a_pre_step_over_every_parameter_on_several_ranks(
        spec, monkeypatch):
    """Under ZeroRedundancyOptimizer each rank's optimizer holds a share of the
    parameters: a global-norm clip or a non-finite skip would be decided on the share."""
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.zeros(3))
    make = uo.optimizer_factory(spec)
    assert uo.explain(make([p])) is not None                  # one rank: built
    monkeypatch.setenv("WORLD_SIZE", "2")                      # torchrun, 2 ranks
    with pytest.raises(ValueError, match=r"on 2 ranks a wrapper that builds the optimizer"):
        make([p])
    make_elementwise = uo.optimizer_factory(uo.Lamb(loss_scale=8.0))
    assert uo.explain(make_elementwise([p])).algorithm == "lamb"
