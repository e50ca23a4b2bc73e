"""OffloadAdam's pipelined transfers (backends/torch/offload.py: HostPipeline): the same
numbers as the unstaged host update, bit for bit, and no optimizer state on the GPU.

The CPU tests run the pipeline's batching and cutting with plain copies
(``stage_cpu=True``); the CUDA tests (skipped without a GPU) run it with its side streams
and compare against the same class on the CPU."""

import contextlib
import copy
import dataclasses
import gc

import pytest
from conftest import require

pytestmark = require("torch")
torch = pytest.importorskip("torch")
from lazy_streams import LazyCuda  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.optim import adam as torch_adam  # noqa: E402

from unified_opt.backends.torch.offload import OffloadAdam  # noqa: E402
from unified_opt.backends.torch.pipeline import (  # noqa: E402
    KEPT_PLANS,
    PIECE_ALIGNMENT,
    HostPipeline,
    plan_pieces,
)
from unified_opt.backends.torch.staging import (  # noqa: E402
    SLOT_ALIGNMENT,
    TRANSFERS,
    HostStaging,
    StagingRing,
    mapped_on_device,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: mixed sizes: large ones cut into pieces (one not a multiple of any vector width),
#: small ones batched together, a 0-size one
SHAPES = [(3 * PIECE_ALIGNMENT + 13,), (7, 5), (2 * PIECE_ALIGNMENT,), (0,), (1,),
          (300, 700), (33,)]
#: small batches so that these sizes take several batches and cuts
SMALL_BATCHES = {"batch_elements": 2 * PIECE_ALIGNMENT, "first_batch_elements": PIECE_ALIGNMENT}
STEPS = 4


def _params(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in SHAPES]


def _grads(step):
    g = torch.Generator().manual_seed(1000 + step)
    out = [torch.randn(s, generator=g) * 10.0 ** (i % 3 - 1) for i, s in enumerate(SHAPES)]
    out[1][2] = 0.0                     # zeros and tiny values beside large ones
    out[4].fill_(1e-30)
    return out


def _two_groups(params, **kw):
    return OffloadAdam([{"params": params[:3], "weight_decay": 0.1},
                        {"params": params[3:], "amsgrad": True, "maximize": True}],
                       lr=0.01, **kw)


def _run(optimizer, params, steps=STEPS, skip=None):
    for t in range(steps):
        for i, (p, g) in enumerate(zip(params, _grads(t))):
            p.grad = None if skip == (t, i) else g.to(p.device)
        optimizer.step()
    return [p.detach().cpu() for p in params]


def _assert_same(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"parameter {i} {list(x.shape)}"


def _state(optimizer, params):
    return [{k: v.clone() for k, v in optimizer.state[p].items()} for p in params]


def _assert_same_state(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys(), i
        for k in x:
            assert torch.equal(x[k], y[k]), f"parameter {i} state {k}"


# -- the batches -------------------------------------------------------------------------

@pytest.mark.parametrize("split", [True, False])
def test_pieces_cover_each_parameter_once_in_order(split):
    sizes = [torch.Size(s).numel() for s in SHAPES]
    batches = plan_pieces(sizes, [split] * len(sizes), **SMALL_BATCHES)
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
    plain_params, staged_params = _params("cpu"), _params("cpu")
    plain = _two_groups(plain_params)
    staged = _two_groups(staged_params)
    staged.pipeline = HostPipeline(split=True, stage_cpu=True, **SMALL_BATCHES)
    _assert_same(_run(staged, staged_params, skip=(2, 0)),
                 _run(plain, plain_params, skip=(2, 0)))
    _assert_same_state(_state(staged, staged_params), _state(plain, plain_params))
    assert staged.state[staged_params[0]]["step"].item() == STEPS - 1   # skipped once


def test_the_host_update_is_torch_adams_fused_kernel():
    ours, theirs = _params("cpu"), _params("cpu")
    offload = OffloadAdam(ours, lr=0.01, weight_decay=0.1)
    offload.pipeline = HostPipeline(split=True, stage_cpu=True, **SMALL_BATCHES)
    adam = torch.optim.Adam(theirs, lr=0.01, weight_decay=0.1, fused=True)
    _assert_same(_run(offload, ours), _run(adam, theirs))


@pytest.mark.parametrize("betas", [(0.9, 0.99), (torch.tensor(0.9), torch.tensor(0.99))],
                         ids=["float-betas", "tensor-betas"])
def test_cut_updates_are_torch_adams_across_a_loaded_state_dict(betas, monkeypatch):
    """Each kind of group (amsgrad, maximize) on both calls into the fused kernel (the
    direct one for float hyper-parameters, torch's own function for tensor betas), with
    the pieces' state views kept between steps and made again for a loaded state."""
    ours, theirs = _params("cpu"), _params("cpu")
    kinds = [{"weight_decay": 0.1}, {"amsgrad": True, "maximize": True}]
    offload = OffloadAdam([{"params": ours[:3], **kinds[0]}, {"params": ours[3:], **kinds[1]}],
                          lr=0.01, betas=betas)
    offload.pipeline = HostPipeline(split=True, stage_cpu=True, **SMALL_BATCHES)
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
            return _run(offload, ours)
        finally:
            monkeypatch.setattr(torch_adam, "adam", through_torch)

    _assert_same(ours_run(), _run(adam, theirs))
    # the direct call for float hyper-parameters, torch's function for tensor ones
    assert (len(calls) > 0) == isinstance(betas[0], torch.Tensor)
    saved = copy.deepcopy(offload.state_dict())      # (it holds the state tensors)
    values = [p.detach().clone() for p in ours]
    ours_run()                          # moves the state on: the load must bring it back
    offload.load_state_dict(saved)
    with torch.no_grad():
        for p, value in zip(ours, values):
            p.copy_(value)
    assert not offload._pieces          # the views of the replaced state are let go
    _assert_same(ours_run(), _run(adam, theirs))
    _assert_same_state(_state(offload, ours), _state(adam, theirs))
    kept = len(offload._pieces)
    offload.state.clear()               # a reset state: its new tensors take the old places
    ours_run()
    assert len(offload._pieces) == kept


def test_an_update_on_the_device_leaves_cpu_parameters_to_the_host_update():
    plain_params, device_params = _params("cpu"), _params("cpu")
    plain, device = _two_groups(plain_params), _two_groups(device_params, update_on="device")
    _assert_same(_run(device, device_params, skip=(1, 3)),
                 _run(plain, plain_params, skip=(1, 3)))
    _assert_same_state(_state(device, device_params), _state(plain, plain_params))


def test_a_device_mapping_of_no_bytes_is_an_empty_tensor_and_pageable_memory_is_refused():
    # an empty tensor is never pinned (found on an H100): it maps to a fresh empty one
    empty = mapped_on_device(torch.zeros((0, 3), dtype=torch.bfloat16), torch.device("meta"))
    assert (empty.device.type, empty.shape, empty.dtype) == ("meta", (0, 3), torch.bfloat16)
    with pytest.raises(ValueError) as raised:
        mapped_on_device(torch.zeros(4), torch.device("meta"))
    assert str(raised.value) == "mapped_on_device needs a pinned, contiguous host tensor"


def test_uo_build_passes_update_on_to_offload_adam():
    import unified_opt as uo

    params = _params("cpu")
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
        OffloadAdam(_params("cpu"), update_on=update_on)
    assert str(raised.value) == words
    optimizer = OffloadAdam(_params("cpu"))
    with pytest.raises(error) as raised:
        optimizer.update_on = update_on             # between steps: the same check
    assert str(raised.value) == words and optimizer.update_on == "host"


def test_an_update_on_the_device_refuses_a_device_other_than_cuda_before_any_state():
    meta = torch.nn.Parameter(torch.ones(3, device="meta"))
    meta.grad = torch.ones_like(meta)
    offload = OffloadAdam([meta, *_params("cpu")[:1]], update_on="device")
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
    params = _params("cpu")
    for p, g in zip(params, _grads(0)):
        p.grad = g
    seen = []

    def update(batch):
        for piece in batch:
            assert piece.whole and piece.value.shape == piece.param.shape
            seen.append(piece.index)
            piece.value.sub_(piece.grad.norm() * piece.grad)

    expected = [(p.detach() - p.grad.norm() * p.grad).clone() for p in params]
    HostPipeline(stage_cpu=True, **SMALL_BATCHES).run(params, update)
    assert seen == list(range(len(params)))
    _assert_same([p.detach() for p in params], expected)


def test_the_own_offload_path_through_a_ring_is_its_unstaged_update_bit_for_bit():
    """``SpecOptimizer(offload=True)`` (whole pieces: any spec's update) staged through a
    ring of 2 slots, several batches a step, against the same build on the CPU."""
    import unified_opt as uo

    spec = uo.AdamOffload(lr=0.01, eps_placement="eps_hat", weight_decay=0.1)
    staged_params, plain_params = _params("cpu"), _params("cpu")
    staged = uo.build(spec, [(f"p{i}", p) for i, p in enumerate(staged_params)])
    plain = uo.build(spec, [(f"p{i}", p) for i, p in enumerate(plain_params)])
    ring = StagingRing(slots=2)
    staged._offload.pipeline = HostPipeline(stage_cpu=True, staging=ring, **SMALL_BATCHES)
    _assert_same(_run(staged, staged_params, skip=(1, 2)), _run(plain, plain_params,
                                                                 skip=(1, 2)))
    batches = staged._offload.pipeline.batches(list(enumerate(staged_params)))
    assert len(batches) > 2 and len(ring.pinned()) == 2
    assert all(piece.whole for batch in batches for piece in batch)


class _StandInCuda:
    """``torch.cuda``'s streams and events as the pipeline calls them, logged, over CPU
    tensors: the streamed loop's order of waits, records and updates, without a GPU."""

    def __init__(self):
        self.log, self.current, self.streams, self.events = [], "caller", 0, 0

    def device(self, device):
        return contextlib.nullcontext()

    def current_stream(self, device):
        return _Stream(self, self.current)

    def Stream(self, device):  # noqa: N802 (torch.cuda's name)
        self.streams += 1
        return _Stream(self, ["down", "up"][self.streams - 1])

    @contextlib.contextmanager
    def stream(self, stream):
        before, self.current = self.current, stream.name
        yield
        self.current = before

    def Event(self):  # noqa: N802
        return _Event(self)


class _Stream:
    def __init__(self, cuda, name):
        self.cuda, self.name = cuda, name

    def wait_stream(self, other):
        self.cuda.log.append(f"{self.name} waits for {other.name}")

    def wait_event(self, event):
        self.cuda.log.append(f"{self.name} waits for event {event.number}")


class _Event:
    def __init__(self, cuda):       # numbered in the order they are made
        self.cuda, self.number = cuda, cuda.events
        cuda.events += 1

    def record(self, stream):
        self.cuda.log.append(f"record {self.number} on {stream.name}")

    def synchronize(self):
        self.cuda.log.append(f"synchronize {self.number}")


class _StreamedOnCpu(HostPipeline):
    def __init__(self, cuda, **kw):
        super().__init__(stage_cpu=True, **kw)
        self.cuda = cuda

    def _run_staged(self, device, indexed, update):
        batches = self.batches(indexed)
        if self.staging.transfer == "copy-engine":
            self._run_streamed(device, batches, update, self.cuda)
            return
        # transfer="kernel": on the CPU each host view stands in for its device mapping
        mapped = [[dataclasses.replace(piece, mapped_value=piece.value,
                                       mapped_grad=piece.grad) for piece in batch]
                  for batch in batches]
        self._run_paired(device, mapped, update, self.cuda)


#: a streamed step's first waits: the downloads after the caller's work (the gradients)
#: and after the previous step's uploads (out of the buffers they fill), the uploads
#: after the caller's work (which may still read the values)
START = ["down waits for caller", "down waits for up", "up waits for caller"]


def _streamed_log(staging):
    """The stand-in's log of one streamed step, checked bit for bit against the plain
    host update; and the number of batches."""
    cuda = _StandInCuda()
    params, plain_params = _params("cpu"), _params("cpu")
    streamed, plain = _two_groups(params), _two_groups(plain_params)
    streamed.pipeline = _StreamedOnCpu(cuda, split=True, staging=staging, **SMALL_BATCHES)
    original = streamed._adam
    streamed._adam = lambda group, pieces, cut: (cuda.log.append("update"),
                                                 original(group, pieces, cut))
    _assert_same(_run(streamed, params, steps=1), _run(plain, plain_params, steps=1))
    return cuda.log, len(streamed.pipeline.batches(list(enumerate(params))))


def test_the_streamed_loop_with_a_buffer_per_parameter_queues_every_download_first():
    log, batches = _streamed_log(HostStaging())
    assert batches > 3
    assert log[:3] == START
    assert log[3:3 + batches] == [f"record {i} on down" for i in range(batches)]
    rest = [e for e in log[3 + batches:-1] if e != "update"]
    assert rest == [f"synchronize {i}" for i in range(batches)]
    assert log[-1] == "caller waits for up" and log.count("update") >= batches
    assert log.index("synchronize 1") > log.index("update")     # batch 0 updated first


def test_the_streamed_loop_through_a_ring_fills_a_slot_after_its_upload():
    log, batches = _streamed_log(StagingRing(slots=2))
    assert batches > 3
    expected = START + ["record 0 on down", "record 1 on down"]
    arrived, events = [0, 1], 2
    for b in range(batches):
        expected.append(f"synchronize {arrived[b]}")
        if b + 2 < batches:     # batch b+2 comes down into batch b's slot once b is up
            expected += [f"record {events} on up", f"down waits for event {events}",
                         f"record {events + 1} on down"]
            arrived.append(events + 1)
            events += 2
    expected.append("caller waits for up")
    assert [e for e in log if e != "update"] == expected
    # each batch is updated after its download and before the next one is awaited
    updates = [i for i, e in enumerate(log) if e == "update"]
    assert updates[0] > log.index("synchronize 0") and updates[-1] < len(log) - 1
    assert log.index("synchronize 1") > updates[0]


def test_offload_adam_moves_batches_of_2_21_elements_by_kernel_through_4_slots():
    pipeline = OffloadAdam([torch.nn.Parameter(torch.zeros(3))]).pipeline
    assert (pipeline.split, pipeline.batch_elements, pipeline.first_batch_elements) == (
        True, 1 << 21, 1 << 19)
    assert isinstance(pipeline.staging, StagingRing)
    assert (pipeline.staging.slots, pipeline.staging.transfer,
            pipeline.staging.pinning) == (4, "kernel", "alloc")
    assert pipeline.staging.lookahead(10) == 3


def test_the_kernel_transfer_sends_a_batch_up_and_a_later_one_down_in_one_kernel():
    """transfer="kernel"'s loop on the CPU (each host view standing in for its device
    mapping), bit for bit against the plain host update: one stream, one
    ``_foreach_copy_`` per batch that sends it up and brings the batch two on down into
    another of the 3 slots, one reused event per slot."""
    ring = StagingRing(slots=3, transfer="kernel")
    copies = []
    foreach_copy = torch._foreach_copy_

    def counted(targets, sources):
        copies.append(len(targets))
        foreach_copy(targets, sources)

    torch._foreach_copy_ = counted
    try:
        log, batches = _streamed_log(ring)
    finally:
        torch._foreach_copy_ = foreach_copy
    assert ring.lookahead(batches) == 2 and batches > 3
    expected = ["up waits for caller", "record 0 on up", "record 1 on up"]
    for b in range(batches):
        expected.append(f"synchronize {b % 3}")
        if b + 2 < batches:
            expected.append(f"record {(b + 2) % 3} on up")
    expected.append("caller waits for up")
    assert [e for e in log if e != "update"] == expected
    updates = [i for i, e in enumerate(log) if e == "update"]
    assert updates[0] > log.index("synchronize 0") and updates[-1] < len(log) - 1
    # values and gradients of the first two batches down, each in its own call; then
    # each batch's values up with the values and gradients of the batch two on
    sizes = [len(batch) for batch in plan_pieces([p.numel() for p in _params("cpu")],
                                                 [True] * len(SHAPES), **SMALL_BATCHES)]
    expected_calls = [2 * sizes[0], 2 * sizes[1]]
    for n, size in enumerate(sizes):
        expected_calls.append(size + (2 * sizes[n + 2] if n + 2 < len(sizes) else 0))
    assert len(sizes) == batches and copies == expected_calls


#: each streamed loop's stagings: copy engines (a buffer per parameter, a ring) and
#: kernel transfers (rings of 2 and 3 slots)
LAZY_STAGINGS = {"per-parameter": HostStaging,
                 "ring-of-2": lambda: StagingRing(slots=2),
                 "kernel-ring-of-2": lambda: StagingRing(slots=2, transfer="kernel"),
                 "kernel-ring-of-3": lambda: StagingRing(slots=3, transfer="kernel")}


@pytest.mark.parametrize("make_staging", LAZY_STAGINGS.values(), ids=LAZY_STAGINGS.keys())
def test_the_streamed_loops_order_each_copy_as_late_as_their_waits_allow(make_staging):
    """Each loop over streams whose copies run only once a wait needs them and the
    caller's work as soon as its waits allow, a kernel's copies last to first
    (tests/lazy_streams.py), five steps: the plain host update's numbers bit for bit.
    The caller edits the first and the last weight on its stream around some steps; one
    step is called from a lazy stream with such an edit queued before it, and the next
    step, from the caller's stream, finds its uploads pending. A download into a slot
    not ordered after the upload out of it, after the caller's work or after the
    uploads of a step called from another stream, or the caller's later work not
    ordered after the uploads, would change the numbers."""
    cuda = LazyCuda()
    params, plain_params = _params("cpu"), _params("cpu")
    streamed, plain = _two_groups(params), _two_groups(plain_params)
    streamed.pipeline = _StreamedOnCpu(cuda, split=True, staging=make_staging(),
                                       **SMALL_BATCHES)
    other = cuda.Stream()
    # (the stream a step is called from, edit before it, edit after it)
    steps = [(cuda.caller, False, True), (other, True, False), (cuda.caller, False, True),
             (cuda.caller, False, False), (cuda.caller, False, True)]

    def edit(stream):
        with torch.no_grad():
            for plain_param in (plain_params[0], plain_params[-1]):
                plain_param.mul_(0.5)
        for value in (params[0].detach(), params[-1].detach()):
            stream.enqueue(lambda value=value: value.mul_(0.5))

    pending = []
    with cuda:
        for t, (caller, before, after) in enumerate(steps):
            for p, q, g in zip(params, plain_params, _grads(t)):
                p.grad, q.grad = g, g.clone()
            if before:
                edit(caller)
            with cuda.stream(caller):
                streamed.step()
            pending.append(sum(len(s.queue) - s.done for s in cuda.streams))
            plain.step()
            if after:
                edit(caller)
        cuda.synchronize()
    assert pending[1] > 0       # the next step's downloads had those uploads to wait for
    _assert_same([p.detach() for p in params], [p.detach() for p in plain_params])
    _assert_same_state(_state(streamed, params), _state(plain, plain_params))


def test_a_kernel_ring_of_two_slots_brings_each_batch_down_after_the_last_went_up():
    log, batches = _streamed_log(StagingRing(slots=2, transfer="kernel"))
    assert [e for e in log if e != "update"] == (
        ["up waits for caller", "record 0 on up"]
        + [e for b in range(batches) for e in [f"synchronize {b % 2}"]
           + ([f"record {(b + 1) % 2} on up"] if b + 1 < batches else [])]
        + ["caller waits for up"])


def _ring_pipeline(slots, split=True):
    """CPU parameters with gradients, and a staged pipeline over a ring of ``slots``."""
    params = _params("cpu")
    for p, g in zip(params, _grads(0)):
        p.grad = g
    ring = StagingRing(slots=slots)
    return params, ring, HostPipeline(split=split, stage_cpu=True, staging=ring,
                                      **SMALL_BATCHES)


@pytest.mark.parametrize("transfer", TRANSFERS)
def test_a_failed_update_still_orders_the_caller_after_the_queued_uploads(transfer):
    cuda = _StandInCuda()
    params = _params("cpu")
    for p, g in zip(params, _grads(0)):
        p.grad = g
    pipeline = _StreamedOnCpu(cuda, split=True, staging=StagingRing(transfer=transfer),
                              **SMALL_BATCHES)
    calls = []

    def update(batch):
        calls.append(len(batch))
        if len(calls) == 2:
            raise RuntimeError("the host update failed")

    with pytest.raises(RuntimeError, match="the host update failed"):
        pipeline.run(params, update)
    assert len(calls) == 2 and cuda.log[-1] == "caller waits for up"


def test_a_ring_gives_each_slot_its_batches_and_grows_to_the_largest():
    params, ring, pipeline = _ring_pipeline(3)
    batches = pipeline.batches(list(enumerate(params)))
    assert len(batches) > 3 and len(ring.pinned()) == 3
    for number, batch in enumerate(batches):
        slot = ring.pinned()[number % 3]
        base, end = slot.data_ptr(), slot.data_ptr() + slot.numel()
        for piece in batch:
            for view in (piece.value, piece.grad):
                if not view.numel():
                    continue            # an empty view points nowhere
                assert base <= view.data_ptr() and view.data_ptr() + \
                    view.numel() * view.element_size() <= end
                assert (view.data_ptr() - base) % SLOT_ALIGNMENT == 0 and view.is_contiguous()
            assert piece.value.shape == (piece.param.shape if piece.whole
                                         else (piece.stop - piece.start,))
        ends = sorted((v.data_ptr(), v.data_ptr() + v.numel() * v.element_size())
                      for piece in batch for v in (piece.value, piece.grad) if v.numel())
        assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:]))     # no overlaps
    size = ring.pinned()[0].numel()
    big = [torch.nn.Parameter(torch.zeros(5 * PIECE_ALIGNMENT))]
    big[0].grad = torch.zeros_like(big[0])
    HostPipeline(stage_cpu=True, staging=ring, **SMALL_BATCHES).batches(list(enumerate(big)))
    assert ring.pinned()[0].numel() == 2 * 5 * PIECE_ALIGNMENT * 4 > size   # whole: grown
    assert len(ring.pinned()) == 3
    fresh = StagingRing(slots=3)        # one batch: one slot
    HostPipeline(stage_cpu=True, staging=fresh, **SMALL_BATCHES).batches(list(enumerate(big)))
    assert len(fresh.pinned()) == 1


def test_a_pipeline_keeps_its_plan_until_the_ring_makes_new_slots():
    params, ring, pipeline = _ring_pipeline(2)
    indexed = list(enumerate(params))

    def pointers(batches):
        return [(piece.value.data_ptr(), piece.grad.data_ptr()) for batch in batches
                for piece in batch]

    first = pipeline.batches(indexed)
    for p in params:
        p.grad = p.grad.clone()                 # fresh gradients, as after a backward
    again = pipeline.batches(indexed)
    assert pointers(again) == pointers(first) and ring.generation == 1
    assert [piece.device_grad.data_ptr() for batch in again for piece in batch] == \
        [p.grad.data_ptr() + 4 * piece.start for batch in again for piece in batch
         for p in [piece.param]]
    big = torch.nn.Parameter(torch.zeros(9 * PIECE_ALIGNMENT))
    big.grad = torch.zeros_like(big)
    HostPipeline(stage_cpu=True, staging=ring).batches([(0, big)])      # slot 0 grows
    assert ring.generation == 2
    slots = [(s.data_ptr(), s.data_ptr() + s.numel()) for s in ring.pinned()]
    for number, batch in enumerate(pipeline.batches(indexed)):     # made again, in place
        low, high = slots[number % 2]
        assert all(low <= piece.value.data_ptr() < high for piece in batch
                   if piece.value.numel())


def test_the_plan_used_every_step_stays_while_other_parameter_sets_come_and_go():
    params, _, pipeline = _ring_pipeline(2)
    indexed = list(enumerate(params))
    pipeline.batches(indexed)
    (every_step,) = pipeline._plans.values()
    others = [indexed[:i] for i in range(1, len(indexed))] + \
        [indexed[i:] for i in range(1, len(indexed))]
    assert len(others) > KEPT_PLANS
    for other in others:
        pipeline.batches(other)
        pipeline.batches(indexed)
    assert len(pipeline._plans) == KEPT_PLANS
    assert any(kept is every_step for kept in pipeline._plans.values())


def test_a_slot_the_pipeline_grows_is_freed():
    params, ring, pipeline = _ring_pipeline(2, split=False)
    indexed = list(enumerate(params))
    pipeline.batches(indexed)
    # the slots' memory, held by the slots and by every view into them
    old = [StorageWeakRef(slot.untyped_storage()) for slot in ring.pinned()]
    big = torch.nn.Parameter(torch.zeros(9 * PIECE_ALIGNMENT))
    big.grad = torch.zeros_like(big)
    pipeline.batches(indexed + [(len(params), big)])        # whole: a slot grows
    gc.collect()
    assert [ref.expired() for ref in old].count(True) == 1 and ring.generation == 2


def test_a_parameter_moved_to_another_device_gets_that_device_s_slots():
    params, ring, pipeline = _ring_pipeline(2)
    indexed = list(enumerate(params))
    pipeline.batches(indexed)
    for p in params:            # moved as module.to(device) may: the same objects
        moved = torch.nn.Parameter(p.detach().to("meta"))
        moved.grad = p.grad.to("meta")
        torch.utils.swap_tensors(p, moved)
    moved = pipeline.batches(indexed)
    slots = [(s.data_ptr(), s.data_ptr() + s.numel())
             for s in ring._slots[torch.device("meta")]]
    assert len(slots) == 2
    for number, batch in enumerate(moved):
        low, high = slots[number % 2]
        assert all(low <= piece.value.data_ptr() < high and piece.device_value.is_meta
                   for piece in batch if piece.value.numel())


def test_each_device_has_its_own_ring_slots():
    ring = StagingRing(slots=2)
    on_cpu, on_meta = torch.zeros(100), torch.zeros(100, device="meta")
    ring.reserve([[(on_cpu, 0, 100, True)]])
    ring.reserve([[(on_meta, 0, 100, True)], [(on_meta, 0, 100, True)]])
    assert [len(slots) for slots in ring._slots.values()] == [1, 2]
    cpu_view = ring.views(0, [(on_cpu, 0, 100, True)])[0][0]
    meta_slots = {s.data_ptr() for s in ring._slots[torch.device("meta")]}
    assert cpu_view.data_ptr() == ring._slots[torch.device("cpu")][0].data_ptr()
    assert cpu_view.data_ptr() not in meta_slots


@pytest.mark.parametrize("make, kwargs, error, words", [
    (StagingRing, {"slots": 1}, ValueError,
     "slots must be at least 2 (one updated while the next comes down), got 1"),
    (StagingRing, {"slots": 2.0}, TypeError, "slots must be an int, got float"),
    (StagingRing, {"slots": True}, TypeError, "slots must be an int, got bool"),
    (StagingRing, {"pinning": "pinned"}, ValueError,
     "StagingRing: pinning must be one of ('alloc', 'register'), got 'pinned'"),
    (HostStaging, {"pinning": 1}, TypeError,
     "HostStaging: pinning must be one of ('alloc', 'register'), got 1 of type int"),
    (HostStaging, {"pinning": "pinned"}, ValueError,
     "HostStaging: pinning must be one of ('alloc', 'register'), got 'pinned'"),
    (StagingRing, {"transfer": 1}, TypeError,
     "StagingRing: transfer must be one of ('copy-engine', 'kernel'), got 1 of type int"),
    (StagingRing, {"transfer": "dma"}, ValueError,
     "StagingRing: transfer must be one of ('copy-engine', 'kernel'), got 'dma'"),
    (StagingRing, {"transfer": "kernel", "pinning": "register"}, ValueError,
     "transfer='kernel' needs pinning='alloc' (a registered page may have another "
     "address on the device), got 'register'"),
    (HostPipeline, {"staging": "ring"}, TypeError,
     "staging must be a StagingRing or a HostStaging, got str"),
    (HostPipeline, {"fetch_values": False}, ValueError,
     "fetch_values=False needs staging=HostStaging(): a StagingRing keeps no values "
     "between steps")])
def test_staging_arguments_are_checked(make, kwargs, error, words):
    with pytest.raises(error) as raised:
        make(**kwargs)
    assert str(raised.value) == words


# -- on CUDA ------------------------------------------------------------------------------

def _device_bytes_the_steps_allocate(optimizer, params) -> int:
    """``STEPS`` steps, each gradient written into a tensor allocated before them; the
    device memory the steps left allocated."""
    for p in params:
        p.grad = torch.zeros_like(p)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for t in range(STEPS):
        for p, g in zip(params, _grads(t)):
            p.grad.copy_(g)
        optimizer.step()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated() - before


#: every staging a pipeline may take on CUDA: (id, keyword arguments of its class)
STAGINGS = [(f"{name}-{how}", make, kwargs)
            for name, make, base in [("ring-of-2", StagingRing, {"slots": 2}),
                                     ("ring", StagingRing, {}),
                                     ("per-parameter", HostStaging, {})]
            for how, kwargs in [("alloc", {**base, "pinning": "alloc"}),
                                ("register", {**base, "pinning": "register"}),
                                ("kernel", {**base, "transfer": "kernel"})]
            if how != "kernel" or make is StagingRing]


@needs_cuda
@pytest.mark.parametrize("make_staging, kwargs", [s[1:] for s in STAGINGS],
                         ids=[s[0] for s in STAGINGS])
@pytest.mark.parametrize("batches", [SMALL_BATCHES, {}], ids=["small-batches", "default"])
def test_cuda_pipelined_offload_adam_is_the_cpu_one_bit_for_bit(batches, make_staging,
                                                                kwargs):
    cpu_params, cuda_params = _params("cpu"), _params("cuda")
    on_cpu, on_cuda = _two_groups(cpu_params), _two_groups(cuda_params)
    staging = make_staging(**kwargs)
    on_cuda.pipeline = HostPipeline(split=True, staging=staging, **batches)
    assert _device_bytes_the_steps_allocate(on_cuda, cuda_params) == 0
    _assert_same([p.detach().cpu() for p in cuda_params], _run(on_cpu, cpu_params))
    states = _state(on_cuda, cuda_params)
    assert all(v.device.type == "cpu" for s in states for v in s.values())
    # the copies' buffers pinned, the state (the host's alone) pageable
    assert staging.pinned() and all(b.is_pinned() for b in staging.pinned() if b.numel())
    assert not any(v.is_pinned() for p in cuda_params for v in on_cuda.state[p].values())
    _assert_same_state(states, _state(on_cpu, cpu_params))


@needs_cuda
def test_cuda_default_offload_adam_is_the_cpu_one_bit_for_bit():
    """What ``OffloadAdam(params)`` builds (kernel transfers, batches of 2**21: SHAPES fit
    in two batches) over several steps, no state on the GPU."""
    cpu_params, cuda_params = _params("cpu"), _params("cuda")
    on_cpu, on_cuda = _two_groups(cpu_params), _two_groups(cuda_params)
    assert on_cuda.pipeline.staging.transfer == "kernel"
    assert _device_bytes_the_steps_allocate(on_cuda, cuda_params) == 0
    _assert_same([p.detach().cpu() for p in cuda_params], _run(on_cpu, cpu_params))
    _assert_same_state(_state(on_cuda, cuda_params), _state(on_cpu, cpu_params))


@needs_cuda
def test_cuda_kernel_transfer_pieces_address_the_slot_s_pinned_bytes():
    params = _params("cuda")
    for p in params:
        p.grad = torch.randn_like(p)
    pipeline = HostPipeline(split=True, staging=StagingRing(transfer="kernel"),
                            **SMALL_BATCHES)
    pieces = [piece for batch in pipeline.batches(list(enumerate(params)))
              for piece in batch]
    for piece in pieces:
        for host, mapped in ((piece.value, piece.mapped_value),
                             (piece.grad, piece.mapped_grad)):
            assert mapped.device.type == "cuda" and host.is_pinned()
            assert (mapped.data_ptr(), mapped.shape, mapped.dtype) == (
                host.data_ptr(), host.shape, host.dtype)
    piece = pieces[-1]
    piece.mapped_grad.copy_(piece.device_grad)     # the device writes the host's pages
    torch.cuda.synchronize()
    assert torch.equal(piece.grad, piece.device_grad.cpu())


@needs_cuda
@pytest.mark.parametrize("transfer", TRANSFERS)
def test_cuda_ring_downloads_wait_for_the_uploads_out_of_their_slots(transfer):
    """Each batch's upload is held back on the GPU (a sleep queued before it): a
    download that did not wait for the upload out of its slot would overwrite the values
    before they go up."""
    cpu_params, cuda_params = _params("cpu"), _params("cuda")
    on_cpu, on_cuda = _two_groups(cpu_params), _two_groups(cuda_params)
    on_cuda.pipeline = HostPipeline(split=True,
                                    staging=StagingRing(slots=2, transfer=transfer),
                                    **SMALL_BATCHES)
    adam = on_cuda._adam

    def update_then_hold_the_uploads(group, pieces, cut):
        adam(group, pieces, cut)
        (_, up), = on_cuda.pipeline._streams.values()
        with torch.cuda.stream(up):
            torch.cuda._sleep(20_000_000)          # about 10 ms on the GPU

    on_cuda._adam = update_then_hold_the_uploads       # SHAPES: 7 batches, 2 slots
    _assert_same(_run(on_cuda, cuda_params), _run(on_cpu, cpu_params))


@needs_cuda
@pytest.mark.parametrize("transfer", TRANSFERS)
def test_cuda_offload_adam_reads_a_value_changed_on_the_device(transfer):
    cpu_params, cuda_params = _params("cpu"), _params("cuda")
    on_cpu, on_cuda = OffloadAdam(cpu_params, lr=0.01), OffloadAdam(cuda_params, lr=0.01)
    on_cuda.pipeline = HostPipeline(split=True, staging=StagingRing(transfer=transfer),
                                    **SMALL_BATCHES)
    for step in range(3):
        for p, g in zip(cuda_params, _grads(step)):
            p.grad = g.cuda()
        for p, g in zip(cpu_params, _grads(step)):
            p.grad = g
        on_cuda.step()
        on_cpu.step()
        with torch.no_grad():                   # e.g. a weight edited between steps
            cuda_params[0].mul_(0.5)
            cpu_params[0].mul_(0.5)
    _assert_same([p.detach().cpu() for p in cuda_params], [p.detach() for p in cpu_params])


@needs_cuda
@pytest.mark.parametrize("transfer", TRANSFERS)
def test_cuda_pipeline_results_are_ordered_before_later_work_on_the_stream(transfer):
    """A kernel queued right after the step (no synchronize) sees the new values, and the
    next step's downloads see the caller's writes: run on a non-default stream."""
    params = [torch.nn.Parameter(torch.zeros(4 * PIECE_ALIGNMENT + 1, device="cuda"))
              for _ in range(3)]
    pipeline = HostPipeline(split=True, staging=StagingRing(transfer=transfer),
                            **SMALL_BATCHES)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.no_grad():
        sums = []
        for step in range(5):
            for p in params:
                p.grad = torch.full_like(p, 1.0)
            pipeline.run(params, lambda batch: [piece.value.add_(piece.grad)
                                                for piece in batch])
            sums.append(torch.stack([p.sum() for p in params]))   # queued on `stream`
            for p in params:
                p.add_(1.0)                     # the next step must read this
    torch.cuda.synchronize()
    n = 4 * PIECE_ALIGNMENT + 1
    assert [s.tolist() for s in sums] == [[float(n * (2 * k + 1))] * 3 for k in range(5)]


def _fused_cuda_adam(params):
    """torch's fused CUDA Adam with ``_two_groups``'s settings."""
    return torch.optim.Adam([{"params": params[:3], "weight_decay": 0.1},
                             {"params": params[3:], "amsgrad": True, "maximize": True}],
                            lr=0.01, fused=True)


@needs_cuda
def test_cuda_update_on_the_device_is_torch_s_fused_cuda_adam_with_host_state():
    ours, theirs = _params("cuda"), _params("cuda")
    offload, adam = _two_groups(ours, update_on="device"), _fused_cuda_adam(theirs)
    assert _device_bytes_the_steps_allocate(offload, ours) == 0     # no state on the GPU
    _assert_same([p.detach().cpu() for p in ours], _run(adam, theirs))
    states = _state(offload, ours)
    assert all(v.device.type == "cpu" for s in states for v in s.values())
    assert all(v.is_pinned() for p in ours for v in offload.state[p].values() if v.numel())
    _assert_same_state(states, [{k: v.cpu() for k, v in s.items()}
                                for s in _state(adam, theirs)])


@needs_cuda
def test_cuda_update_on_the_device_resumes_from_a_state_dict():
    ours, theirs = _params("cuda"), _params("cuda")
    offload, adam = _two_groups(ours, update_on="device"), _fused_cuda_adam(theirs)
    _run(offload, ours, steps=2)
    _run(adam, theirs, steps=2)
    saved = offload.state_dict()
    resumed = _two_groups(ours, update_on="device")
    resumed.load_state_dict(saved)          # pageable host copies: pinned at the next step
    for t in range(2, STEPS):
        for p, q, g in zip(ours, theirs, _grads(t)):
            p.grad, q.grad = g.cuda(), g.cuda()
        resumed.step()
        adam.step()
    _assert_same([p.detach().cpu() for p in ours], [p.detach().cpu() for p in theirs])
    assert all(v.is_pinned() for p in ours for v in resumed.state[p].values() if v.numel())


@needs_cuda
def test_cuda_update_on_the_device_refuses_a_second_device_before_any_state():
    cuda, meta = torch.nn.Parameter(torch.ones(3, device="cuda")), \
        torch.nn.Parameter(torch.ones(3, device="meta"))
    offload = OffloadAdam([cuda, meta], update_on="device")
    cuda.grad, meta.grad = torch.ones_like(cuda), torch.ones_like(meta)
    with pytest.raises(ValueError) as raised:
        offload.step()
    assert str(raised.value) == ("OffloadAdam(update_on='device') updates the parameters "
                                 "of one CUDA device (and the CPU's), got cuda:0, meta")
    assert not offload.state


@needs_cuda
def test_cuda_update_on_the_device_refuses_layouts_its_kernel_cannot_take():
    transposed = torch.nn.Parameter(torch.ones(4, 3, device="cuda").t())
    transposed.grad = torch.ones_like(transposed)
    offload = OffloadAdam([transposed], update_on="device")
    with pytest.raises(ValueError, match=r"needs contiguous parameters .* strides \(1, 3\)"):
        offload.step()
    plain = torch.nn.Parameter(torch.ones(4, 3, device="cuda"))
    plain.grad = torch.ones(3, 4, device="cuda").t()
    offload = OffloadAdam([plain], update_on="device")
    with pytest.raises(ValueError, match=r"gradient must have its dtype and strides .*"
                                         r"got torch.float32, \(1, 4\)"):
        offload.step()
    plain = torch.nn.Parameter(torch.ones(3, device="cuda"))
    plain.grad_dtype = None     # (else torch itself refuses a float64 gradient)
    plain.grad = torch.ones(3, device="cuda", dtype=torch.float64)
    offload = OffloadAdam([plain], update_on="device")
    with pytest.raises(ValueError, match=r"gradient must have its dtype and strides .*"
                                         r"got torch.float64"):
        offload.step()
    assert not offload.state


@needs_cuda
def test_cuda_update_on_the_device_updates_cpu_parameters_beside_on_the_host():
    """One group of GPU and CPU parameters: the GPU's through the mapping, the CPU's by
    the host update, each as its own fused kernel does it."""
    on_gpu, on_cpu = _params("cuda"), _params("cpu", seed=1)
    mixed = [p for pair in zip(on_gpu, on_cpu) for p in pair]
    offload = OffloadAdam(mixed, lr=0.01, update_on="device")
    ref_gpu, ref_cpu = _params("cuda"), _params("cpu", seed=1)
    adam_gpu = torch.optim.Adam(ref_gpu, lr=0.01, fused=True)
    adam_cpu = torch.optim.Adam(ref_cpu, lr=0.01, fused=True)
    for t in range(STEPS):
        for ps, device in ((on_gpu, "cuda"), (on_cpu, "cpu"), (ref_gpu, "cuda"),
                           (ref_cpu, "cpu")):
            for p, g in zip(ps, _grads(t)):
                p.grad = g.to(device)
        offload.step()
        adam_gpu.step()
        adam_cpu.step()
    _assert_same([p.detach().cpu() for p in on_gpu], [p.detach().cpu() for p in ref_gpu])
    _assert_same([p.detach() for p in on_cpu], [p.detach() for p in ref_cpu])
    assert all(v.is_pinned() for p in on_gpu for v in offload.state[p].values() if v.numel())
    assert not any(v.is_pinned() for p in on_cpu for v in offload.state[p].values())
