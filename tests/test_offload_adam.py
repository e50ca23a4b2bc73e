"""OffloadAdam and the host-update loop on the CPU (backends/torch/offload.py,
pipeline.py): batches cut and filled within their bounds, the staged update (plain copies,
``stage_cpu=True``) the same numbers as the plain host update and as torch's fused Adam,
bit for bit, and ``update_on``'s checks and refusals."""

import copy
import gc

import pytest
from conftest import require

pytestmark = require("torch")
torch = pytest.importorskip("torch")
import offload_cases as cases  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.optim import adam as torch_adam  # noqa: E402

from unified_opt.backends.torch.offload import OffloadAdam  # noqa: E402
from unified_opt.backends.torch.pipeline import (  # noqa: E402
    PIECE_ALIGNMENT,
    HostPipeline,
    plan_pieces,
)
from unified_opt.backends.torch.staging import (  # noqa: E402
    StagingRing,
    mapped_on_device,
)

# -- the batches -------------------------------------------------------------------------

@pytest.mark.parametrize("split", [True, False])
def test_pieces_cover_each_parameter_once_in_order(split):
    sizes = [torch.Size(s).numel() for s in cases.SHAPES]
    batches = plan_pieces(sizes, [split] * len(sizes), **cases.SMALL_BATCHES)
    pieces = [piece for batch in batches for piece in batch]
    for index, numel in enumerate(sizes):
        mine = [(start, stop) for i, start, stop in pieces if i == index]
        assert mine[0][0] == 0 and mine[-1][1] == numel
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))      # contiguous, ordered
        assert all(start % PIECE_ALIGNMENT == 0 for start, _ in mine)
        assert split or len(mine) == 1
    assert [i for i, _, _ in pieces] == sorted(i for i, _, _ in pieces)
    if split:
        assert sum(stop - start for _, start, stop in batches[0]) <= PIECE_ALIGNMENT
        assert all(sum(stop - start for _, start, stop in b) <= 2 * PIECE_ALIGNMENT
                   for b in batches)
        assert any(len(b) > 1 for b in batches)          # small tensors share a call


def test_pieces_of_random_sizes_fill_batches_within_their_bounds():
    import random

    rng = random.Random(0)
    for _ in range(200):
        sizes = [rng.choice([0, 1, 17, PIECE_ALIGNMENT, 5 * PIECE_ALIGNMENT + 3,
                             rng.randrange(1, 20 * PIECE_ALIGNMENT)])
                 for _ in range(rng.randrange(1, 12))]
        split = [rng.random() < 0.7 for _ in sizes]
        first = PIECE_ALIGNMENT * rng.randrange(1, 4)
        most = first * rng.randrange(1, 9)
        batches = plan_pieces(sizes, split, most, first)
        covered = {}
        for batch in batches:
            assert batch
            total = sum(stop - start for _, start, stop in batch)
            over = [i for i, start, stop in batch if not split[i] and stop - start > most]
            assert total <= most or over, (sizes, split, batch)
            for i, start, stop in batch:
                assert start == covered.get(i, 0) and (start % PIECE_ALIGNMENT == 0)
                covered[i] = stop
        assert covered == dict(enumerate(sizes))


def test_batch_sizes_below_the_alignment_are_refused():
    with pytest.raises(ValueError, match="at least"):
        plan_pieces([10], [True], 100, 100)


# -- on the CPU: the staged loop with plain copies -----------------------------------------

def test_staged_and_cut_updates_are_the_plain_host_update_bit_for_bit():
    plain_params, staged_params = cases.make_params("cpu"), cases.make_params("cpu")
    plain = cases.two_groups(plain_params)
    staged = cases.two_groups(staged_params)
    staged.pipeline = HostPipeline(split=True, stage_cpu=True, **cases.SMALL_BATCHES)
    cases.assert_same(cases.run_steps(staged, staged_params, skip=(2, 0)),
                      cases.run_steps(plain, plain_params, skip=(2, 0)))
    cases.assert_same_state(cases.state_copy(staged, staged_params),
                            cases.state_copy(plain, plain_params))
    assert staged.state[staged_params[0]]["step"].item() == cases.STEPS - 1   # skipped once


def test_the_host_update_is_torch_adams_fused_kernel():
    ours, theirs = cases.make_params("cpu"), cases.make_params("cpu")
    offload = OffloadAdam(ours, lr=0.01, weight_decay=0.1)
    offload.pipeline = HostPipeline(split=True, stage_cpu=True, **cases.SMALL_BATCHES)
    adam = torch.optim.Adam(theirs, lr=0.01, weight_decay=0.1, fused=True)
    cases.assert_same(cases.run_steps(offload, ours), cases.run_steps(adam, theirs))


def _kept_calls(offload):
    """Each kept batch's kernel arguments (``OffloadAdam``'s ``_BatchCall``)."""
    return [batch.memo.get("adam") for _, batches, _, _ in offload.pipeline._plans.values()
            for batch in batches]


def test_kept_kernel_arguments_follow_state_written_by_hand_and_a_changed_group():
    """A step makes each batch's kernel arguments once and keeps them; a state tensor
    replaced by hand (here one not contiguous), a new lr or betas are read at the next
    step, as torch's Adam reads them."""
    ours, theirs = cases.make_params("cpu"), cases.make_params("cpu")
    offload = OffloadAdam(ours, lr=0.01)
    offload.pipeline = HostPipeline(split=True, stage_cpu=True, **cases.SMALL_BATCHES)
    adam = torch.optim.Adam(theirs, lr=0.01, fused=True)
    cases.run_steps(offload, ours, steps=2)
    cases.run_steps(adam, theirs, steps=2)
    kept = _kept_calls(offload)
    cases.run_steps(offload, ours, steps=1)
    cases.run_steps(adam, theirs, steps=1)
    assert len(kept) > 3 and all(a is b is not None for a, b in zip(kept, _kept_calls(offload)))
    for optimizer, params in ((offload, ours), (adam, theirs)):
        optimizer.state[params[0]]["exp_avg"] = optimizer.state[params[0]]["exp_avg"] * 0.5
        optimizer.param_groups[0].update(lr=0.005, betas=(0.8, 0.9))
    ours_sq = offload.state[ours[1]]["exp_avg_sq"]
    offload.state[ours[1]]["exp_avg_sq"] = ours_sq.t().contiguous().t()     # (7, 5) strided
    assert not offload.state[ours[1]]["exp_avg_sq"].is_contiguous()
    cases.assert_same(cases.run_steps(offload, ours), cases.run_steps(adam, theirs))
    cases.assert_same_state(cases.state_copy(offload, ours), cases.state_copy(adam, theirs))


def test_a_step_keeps_no_reference_to_the_gradients():
    """The kept pieces let go of the step's device views: a gradient set to None is
    freed (with its memory on the GPU), not held until the next step."""
    params = cases.make_params("cpu")
    offload = OffloadAdam(params, lr=0.01)
    offload.pipeline = HostPipeline(split=True, stage_cpu=True, **cases.SMALL_BATCHES)
    cases.run_steps(offload, params, steps=1)
    grads = [StorageWeakRef(p.grad.untyped_storage()) for p in params if p.numel()]
    for p in params:
        p.grad = None
    gc.collect()
    assert grads and all(ref.expired() for ref in grads)


@pytest.mark.parametrize("betas", [(0.9, 0.99), (torch.tensor(0.9), torch.tensor(0.99))],
                         ids=["float-betas", "tensor-betas"])
def test_cut_updates_are_torch_adams_across_a_loaded_state_dict(betas, monkeypatch):
    """Each kind of group (amsgrad, maximize) on both calls into the fused kernel (the
    direct one for float hyper-parameters, torch's own function for tensor betas), with
    the pieces' state views kept between steps and made again for a loaded state."""
    ours, theirs = cases.make_params("cpu"), cases.make_params("cpu")
    kinds = [{"weight_decay": 0.1}, {"amsgrad": True, "maximize": True}]
    offload = OffloadAdam([{"params": ours[:3], **kinds[0]}, {"params": ours[3:], **kinds[1]}],
                          lr=0.01, betas=betas)
    offload.pipeline = HostPipeline(split=True, stage_cpu=True, **cases.SMALL_BATCHES)
    adam = torch.optim.Adam([{"params": theirs[:3], **kinds[0]},
                             {"params": theirs[3:], **kinds[1]}], lr=0.01, betas=betas,
                            fused=True)
    calls = []
    through_torch = torch_adam.adam

    def ours_run():
        def counted(*args, **kwargs):
            calls.append(1)
            return through_torch(*args, **kwargs)

        monkeypatch.setattr(torch_adam, "adam", counted)
        try:
            return cases.run_steps(offload, ours)
        finally:
            monkeypatch.setattr(torch_adam, "adam", through_torch)

    cases.assert_same(ours_run(), cases.run_steps(adam, theirs))
    # the direct call for float hyper-parameters, torch's function for tensor ones
    assert (len(calls) > 0) == isinstance(betas[0], torch.Tensor)
    saved = copy.deepcopy(offload.state_dict())      # (it holds the state tensors)
    values = [p.detach().clone() for p in ours]
    ours_run()                          # moves the state on: the load must bring it back
    offload.load_state_dict(saved)
    with torch.no_grad():
        for p, value in zip(ours, values):
            p.copy_(value)
    assert not any(_kept_calls(offload))    # the views of the replaced state are let go
    cases.assert_same(ours_run(), cases.run_steps(adam, theirs))
    cases.assert_same_state(cases.state_copy(offload, ours), cases.state_copy(adam, theirs))
    kept = _kept_calls(offload)
    offload.state.clear()               # a reset state: its new tensors take the old places
    ours_run()
    again = _kept_calls(offload)
    assert len(again) == len(kept) and all(a is not None and a is not b
                                           for a, b in zip(again, kept))


def test_an_update_on_the_device_leaves_cpu_parameters_to_the_host_update():
    plain_params, device_params = cases.make_params("cpu"), cases.make_params("cpu")
    plain = cases.two_groups(plain_params)
    device = cases.two_groups(device_params, update_on="device")
    cases.assert_same(cases.run_steps(device, device_params, skip=(1, 3)),
                      cases.run_steps(plain, plain_params, skip=(1, 3)))
    cases.assert_same_state(cases.state_copy(device, device_params),
                            cases.state_copy(plain, plain_params))


def test_a_device_mapping_of_no_bytes_is_an_empty_tensor_and_pageable_memory_is_refused():
    # an empty tensor is never pinned (found on an H100): it maps to a fresh empty one
    empty = mapped_on_device(torch.zeros((0, 3), dtype=torch.bfloat16), torch.device("meta"))
    assert (empty.device.type, empty.shape, empty.dtype) == ("meta", (0, 3), torch.bfloat16)
    with pytest.raises(ValueError) as raised:
        mapped_on_device(torch.zeros(4), torch.device("meta"))
    assert str(raised.value) == "mapped_on_device needs a pinned, contiguous host tensor"


def test_uo_build_passes_update_on_to_offload_adam():
    import unified_opt as uo

    params = cases.make_params("cpu")
    optimizer = uo.build(uo.AdamOffload(lr=0.01), params, options={"update_on": "device"})
    assert isinstance(optimizer, OffloadAdam) and optimizer.update_on == "device"
    with pytest.raises(ValueError, match="update_on must be one of"):
        uo.build(uo.AdamOffload(), params, options={"update_on": "gpu"})


@pytest.mark.parametrize("update_on, error, words", [
    (None, TypeError,
     "OffloadAdam: update_on must be one of ('host', 'device'), got None of type NoneType"),
    ("gpu", ValueError, "OffloadAdam: update_on must be one of ('host', 'device'), got 'gpu'")])
def test_update_on_is_checked(update_on, error, words):
    with pytest.raises(error) as raised:
        OffloadAdam(cases.make_params("cpu"), update_on=update_on)
    assert str(raised.value) == words
    optimizer = OffloadAdam(cases.make_params("cpu"))
    with pytest.raises(error) as raised:
        optimizer.update_on = update_on             # between steps: the same check
    assert str(raised.value) == words and optimizer.update_on == "host"


def test_an_update_on_the_device_refuses_a_device_other_than_cuda_before_any_state():
    meta = torch.nn.Parameter(torch.ones(3, device="meta"))
    meta.grad = torch.ones_like(meta)
    offload = OffloadAdam([meta, *cases.make_params("cpu")[:1]], update_on="device")
    with pytest.raises(ValueError) as raised:
        offload.step()
    assert str(raised.value) == ("OffloadAdam(update_on='device') updates the parameters "
                                 "of one CUDA device (and the CPU's), got meta")
    assert not offload.state


def test_a_device_mapping_s_holder_frees_the_host_pages_without_the_collector():
    from unified_opt.backends.torch.staging import _Mapped

    host = torch.zeros(16)
    storage = StorageWeakRef(host.untyped_storage())
    holder = _Mapped(host, 64)
    assert holder.__cuda_array_interface__["data"] == (host.data_ptr(), False)
    del host
    gc.disable()
    try:
        del holder
        assert storage.expired()                # no cycle kept the pages
    finally:
        gc.enable()


def test_whole_pieces_for_an_update_that_needs_the_whole_tensor():
    params = cases.make_params("cpu")
    for p, g in zip(params, cases.grads_at(0)):
        p.grad = g
    seen = []

    def update(batch):
        for piece in batch:
            assert piece.whole and piece.value.shape == piece.param.shape
            seen.append(piece.index)
            piece.value.sub_(piece.grad.norm() * piece.grad)

    expected = [(p.detach() - p.grad.norm() * p.grad).clone() for p in params]
    HostPipeline(stage_cpu=True, **cases.SMALL_BATCHES).run(params, update)
    assert seen == list(range(len(params)))
    cases.assert_same([p.detach() for p in params], expected)


def test_the_own_offload_path_through_a_ring_is_its_unstaged_update_bit_for_bit():
    """``SpecOptimizer(offload=True)`` (whole pieces: any spec's update) staged through a
    ring of 2 slots, several batches a step, against the same build on the CPU."""
    import unified_opt as uo

    spec = uo.AdamOffload(lr=0.01, eps_placement="eps_hat", weight_decay=0.1)
    staged_params, plain_params = cases.make_params("cpu"), cases.make_params("cpu")
    staged = uo.build(spec, [(f"p{i}", p) for i, p in enumerate(staged_params)])
    plain = uo.build(spec, [(f"p{i}", p) for i, p in enumerate(plain_params)])
    ring = StagingRing(slots=2)
    staged._offload.pipeline = HostPipeline(stage_cpu=True, staging=ring, **cases.SMALL_BATCHES)
    cases.assert_same(cases.run_steps(staged, staged_params, skip=(1, 2)),
                      cases.run_steps(plain, plain_params, skip=(1, 2)))
    batches = staged._offload.pipeline.batches(list(enumerate(staged_params)))
    assert len(batches) > 2 and len(ring.pinned()) == 2
    assert all(piece.whole for batch in batches for piece in batch)


@pytest.mark.parametrize("edit, words", [
    (lambda held: held.__setitem__("exp_avg", torch.zeros(1, 6)),
     "'exp_avg' is [1, 6], it keeps [5, 6]"),
    (lambda held: held.__setitem__("exp_avg_sq", torch.zeros(6, 5)),
     "'exp_avg_sq' is [6, 5], it keeps [5, 6]"),
    (lambda held: held.pop("exp_avg"), "lacks ['exp_avg']"),
    (lambda held: held.__setitem__("step", torch.tensor(-1.0)), "'step' must be a whole count"),
], ids=["broadcastable", "transposed", "missing", "negative-step"])
def test_a_state_dict_whose_moments_do_not_fit_is_refused_before_loading(edit, words):
    """Its fused kernel is called without torch's checks: a moment of another shape would
    be written out of bounds."""
    p = torch.nn.Parameter(torch.randn(5, 6))
    optimizer = OffloadAdam([p], lr=0.01)
    p.grad = torch.randn(5, 6)
    optimizer.step()
    saved = copy.deepcopy(optimizer.state_dict())
    edit(saved["state"][0])
    before = copy.deepcopy(optimizer.state_dict())
    with pytest.raises(ValueError) as raised:
        optimizer.load_state_dict(saved)
    assert "OffloadAdam.load_state_dict: the state of parameter 0 [5, 6]" in str(raised.value)
    assert words in str(raised.value)
    assert str(optimizer.state_dict()) == str(before)
