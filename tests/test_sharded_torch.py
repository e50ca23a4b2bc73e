"""DTensor parameters (FSDP2 ``fully_shard``, tensor parallel) on a one-rank gloo group
on CPU (a DTensor of one shard): the own path runs their update eagerly through
DTensor's operations and keeps the placements; what it cannot do with shards is refused
at build, naming the parameters. The numbers on 2 ranks under ``fully_shard`` are
checked in ``test_data_parallel.py``."""

import socket

import numpy as np
import pytest
from support import Replay, judge

import unified_opt as uo
from unified_opt.conformance.trajectory import Recorder

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

SHAPES = {"w": (8, 4), "one_row": (1, 5), "b": (4,)}


@pytest.fixture
def mesh():
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def _params(mesh=None):
    from torch.distributed.tensor import Shard, distribute_tensor

    rng = np.random.default_rng(0)
    out = []
    for name, shape in SHAPES.items():
        value = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        if mesh is not None and len(shape) > 1:
            value = distribute_tensor(value, mesh, [Shard(0)])
        out.append((name, torch.nn.Parameter(value)))
    return out


def _grads(spec, steps=4) -> list[dict]:
    """The gradients of each step; a NaN row at step 2 for a spec that skips it."""
    rng = np.random.default_rng(1)
    out = []
    for t in range(steps):
        out.append({name: rng.standard_normal(shape).astype(np.float32)
                    for name, shape in SHAPES.items()})
        if t == 2 and spec.skip_nonfinite:
            for g in out[-1].values():
                g[0] = np.nan                             # the spec skips this step
    return out


def _full(p):
    return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().numpy().copy()


def _run(spec, params, steps=4, recorder=None):
    from torch.distributed.tensor import distribute_tensor

    optimizer = uo.build(spec, params, path="own")
    for grads in _grads(spec, steps):
        for name, p in params:
            g = torch.from_numpy(grads[name])
            p.grad = (distribute_tensor(g, p.device_mesh, p.placements)
                      if hasattr(p, "device_mesh") else g)
        optimizer.step()
        if recorder is not None:
            recorder.add(0.0, {name: _full(p) for name, p in params}, {},
                         skipped=uo.skipped_steps(optimizer)[-1] if spec.skip_nonfinite
                         else None)
    return optimizer


def _assert_follows_the_oracle(spec, recorder):
    """The conformance rule on these gradients: DTensor takes a norm as the root of the
    shards' summed squares, not in vector_norm's one pass, and how either sums depends on
    the CPU's vector width, so a trust ratio or clipping factor may move by an ulp; no
    fixed margin between the sharded and the whole run says that on every CPU."""
    replay = Replay(spec, {name: _full(p) for name, p in _params()}, tuple(_grads(spec)))
    comparison = judge(recorder.trajectory(), replay, state=False, lr=False)
    assert comparison.passed, comparison.detail


@pytest.mark.parametrize("spec", [
    uo.Lamb(lr=0.01, weight_decay=0.01),
    uo.preset("mindformers.core.Came", learning_rate=1e-3),
    uo.Adafactor(),              # own path: torch.optim.Adafactor fails on a row shard
    uo.Lamb(lr=0.01, loss_scale=4.0, skip_nonfinite=True,
            grad_clip=uo.ClipByGlobalNorm(max_norm=0.5)),
], ids=["lamb", "came", "adafactor", "lamb-pre-step"])
def test_the_own_path_steps_shards_as_it_steps_whole_tensors(mesh, spec):
    from torch.distributed.tensor import DTensor, Shard

    sharded, plain = _params(mesh), _params()
    recorders = Recorder(), Recorder()
    optimizer = _run(spec, sharded, recorder=recorders[0])
    _run(spec, plain, recorder=recorders[1])
    for name, p in sharded:
        if isinstance(p, DTensor):
            assert p.placements == (Shard(0),), name
            for key, array in optimizer.spec_state(p).items():
                # full-size state stays sharded by rows; a factored column moment
                # (reduced over the rows) is whole on every rank
                assert isinstance(array, DTensor), (name, key)
                if array.shape == p.shape and not key.endswith("_col"):
                    assert array.placements == (Shard(0),), (name, key)
    for recorder in recorders:
        _assert_follows_the_oracle(spec, recorder)
    if spec.skip_nonfinite:
        assert uo.skipped_steps(optimizer) == [False, False, True, False]


def test_a_native_class_runs_on_them(mesh):
    params = _params(mesh)
    optimizer = uo.build(uo.AdamW(lr=0.1), params)
    assert uo.explain(optimizer).native == "torch.optim.AdamW"
    for _, p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    w = params[0][1].full_tensor()
    # AdamW's first step: w - lr * (wd * w) - lr * sign(g) (m / sqrt(v) = 1), a few
    # float32 operations each rounded once (FMA or not): assert_close's float32 default
    # (rtol=1.3e-6, 10 ulps) holds on every CPU
    start = dict(_params())["w"].detach()
    torch.testing.assert_close(w, start - 0.1 * 0.01 * start - 0.1)


@pytest.mark.parametrize("spec, options, match", [
    (uo.Lamb(), {"compile": True}, r"compile=True, but parameters \['w', 'one_row'\] are "
                                   "DTensors .* runs eagerly"),
    (uo.Lamb(), {"compile": "inductor"}, r"compile='inductor', but parameters"),
    (uo.DGCMomentum(lr=0.1), {}, r"\['w', 'one_row'\] are DTensors .* 'dgc_momentum' "
                                 "exchanges its gradients"),
    (uo.AdamOffload(lr=0.1), {}, r"'adam_offload' keeps its state in host memory"),
])
def test_what_the_own_path_cannot_do_with_shards_is_refused(mesh, spec, options, match):
    params = _params(mesh)
    before = [p.full_tensor().clone() if hasattr(p, "full_tensor") else p.clone()
              for _, p in params]
    with pytest.raises(ValueError, match=match):
        uo.build(spec, params, path="own", options=options)
    for (_, p), b in zip(params, before):     # untouched: the same bits
        torch.testing.assert_close(p.full_tensor() if hasattr(p, "full_tensor") else p, b,
                                   rtol=0, atol=0)


def test_adam_offload_is_refused_on_the_default_path_too(mesh):
    """Its native class (OffloadAdam, whole-tensor host state) raises on a DTensor at the
    first step; its descriptor says so, and the own path refuses host state on shards."""
    with pytest.raises(ValueError, match=r"'adam_offload' keeps its state in host memory"):
        uo.build(uo.AdamOffload(lr=0.1), _params(mesh))


def test_a_state_file_is_refused_naming_the_sharded_parameters(mesh, tmp_path):
    optimizer = _run(uo.Lamb(lr=0.01), _params(mesh))
    with pytest.raises(ValueError, match=r"save_state: parameters \['w', 'one_row'\] are "
                                         "DTensors .* torch.distributed.checkpoint"):
        uo.save_state(optimizer, tmp_path / "state.safetensors")
    assert not (tmp_path / "state.safetensors").exists()


@pytest.mark.parametrize("spec, native", [
    (uo.Adafactor(), "torch.optim.Adafactor"),
    (uo.preset("torch.optim.Rprop", lr=0.01), "torch.optim.Rprop"),
])
def test_a_native_class_that_fails_on_shards_gives_way_to_the_own_path(mesh, spec, native):
    """torch's Adafactor and Rprop raise on a row shard (measured); on whole tensors
    they are what uo.build picks when asked for the native class (whether the default
    picks them follows the measured speed table)."""
    assert uo.explain(uo.build(spec, _params(), prefer="native")).native == native
    sharded = _params(mesh)
    optimizer = uo.build(spec, sharded, prefer="native")
    decision = uo.explain(optimizer)
    assert decision.path == "own"
    assert any("no DTensor parameter" in u and "['w', 'one_row']" in u
               for u in dict(decision.rejected)[native]), decision
    recorders = Recorder(), Recorder()
    _run(spec, sharded, recorder=recorders[0])
    _run(spec, _params(), recorder=recorders[1])
    for recorder in recorders:
        _assert_follows_the_oracle(spec, recorder)
