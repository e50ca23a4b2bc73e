"""The host-update loop's order of copies, events and waits (backends/torch/pipeline.py)
under stand-ins for ``torch.cuda`` on the CPU: one that logs each call, one under which
copies run as late as their waits allow (tests/lazy_streams.py); and the staging ring's
slots, plans and argument checks (backends/torch/staging.py)."""

import contextlib
import dataclasses
import gc
import warnings

import pytest
from conftest import require

pytestmark = require("torch")
torch = pytest.importorskip("torch")
import offload_cases as cases  # noqa: E402
from lazy_streams import LazyCuda  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

from unified_opt.backends.torch.moves import TableMoves, plain_layout  # noqa: E402
from unified_opt.backends.torch.offload import OffloadAdam  # noqa: E402
from unified_opt.backends.torch.pipeline import (  # noqa: E402
    KEPT_PLANS,
    PIECE_ALIGNMENT,
    Batch,
    HostPipeline,
    paired_launches,
    plan_pieces,
)
from unified_opt.backends.torch.staging import (  # noqa: E402
    SLOT_ALIGNMENT,
    TRANSFERS,
    HostStaging,
    StagingRing,
)


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


class _Interpreted:
    """The table transfer's Triton kernel run by Triton's interpreter over CPU memory, on
    the stand-in's current stream: at once, or queued on a lazy side stream."""

    def __init__(self, cuda):
        from triton.runtime.interpreter import InterpretedFunction

        from unified_opt.backends.torch import move_kernel

        self.cuda, self.launches = cuda, []
        self.kernel = InterpretedFunction(move_kernel.move.fn)

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.launches.append(grid[0])

            def run():
                with warnings.catch_warnings():    # numpy's, about the interpreter's code
                    warnings.filterwarnings("ignore", category=DeprecationWarning,
                                            module="triton")
                    self.kernel[grid](*args, **kw)

            deferred = getattr(self.cuda, "_deferred", lambda: False)()
            self.cuda.current.enqueue(run) if deferred else run()
        return launch


class _StreamedOnCpu(HostPipeline):
    def __init__(self, cuda, **kw):
        super().__init__(stage_cpu=True, **kw)
        self.cuda = cuda
        self.kernel = _Interpreted(cuda) if self.staging.transfer == "table" else None

    def _run_staged(self, device, indexed, update):
        def logged(batch):
            if hasattr(self.cuda, "log"):       # (LazyCuda keeps none)
                self.cuda.log.append("update")
            update(batch)

        batches = self.batches(indexed)
        if self.staging.transfer == "copy-engine":
            self._run_streamed(device, batches, logged, self.cuda)
            return
        # transfer="kernel" or "table": on the CPU each host view stands in for its device
        # mapping
        mapped = [Batch([dataclasses.replace(piece, mapped_value=piece.value,
                                             mapped_grad=piece.grad) for piece in batch],
                        batch.memo)
                  for batch in batches]
        moves = None
        if self.kernel is not None:
            params = [p for _, p in indexed]
            moves = TableMoves(mapped, params, [plain_layout(p) for p in params],
                               paired_launches(self.staging.lookahead(len(mapped)),
                                               len(mapped)))
            moves._move = self.kernel
        self._run_paired(device, mapped, logged, self.cuda, moves)


#: a streamed step's first waits: the downloads after the caller's work (the gradients)
#: and after the previous step's uploads (out of the buffers they fill), the uploads
#: after the caller's work (which may still read the values)
START = ["down waits for caller", "down waits for up", "up waits for caller"]


def _streamed_log(staging):
    """The stand-in's log of one streamed step, checked bit for bit against the plain
    host update; and the number of batches."""
    cuda = _StandInCuda()
    params, plain_params = cases.make_params("cpu"), cases.make_params("cpu")
    streamed, plain = cases.two_groups(params), cases.two_groups(plain_params)
    streamed.pipeline = _StreamedOnCpu(cuda, split=True, staging=staging, **cases.SMALL_BATCHES)
    cases.assert_same(cases.run_steps(streamed, params, steps=1),
                      cases.run_steps(plain, plain_params, steps=1))
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
    sizes = [len(batch) for batch in plan_pieces(
        [p.numel() for p in cases.make_params("cpu")], [True] * len(cases.SHAPES),
        **cases.SMALL_BATCHES)]
    expected_calls = [2 * sizes[0], 2 * sizes[1]]
    for n, size in enumerate(sizes):
        expected_calls.append(size + (2 * sizes[n + 2] if n + 2 < len(sizes) else 0))
    assert len(sizes) == batches and copies == expected_calls


def test_the_table_transfer_moves_each_launch_s_pieces_in_one_kernel_over_their_rows():
    """transfer="table"'s loop on the CPU (Triton's interpreter over the host views that
    stand in for the device's mapping), bit for bit against the plain host update: the
    same stream, events and waits as transfer="kernel", one kernel a launch over a job
    row per 64 KiB chunk of each value and gradient down and each value up, and no
    ``_foreach_copy_`` (every piece here is contiguous)."""
    from unified_opt.backends.torch.moves import CHUNK_BYTES

    kernel_log, _ = _streamed_log(StagingRing(slots=3, transfer="kernel"))
    copies = []
    foreach_copy = torch._foreach_copy_
    ring = StagingRing(slots=3, transfer="table")
    torch._foreach_copy_ = lambda targets, sources: copies.append(len(targets))
    try:
        cuda = _StandInCuda()
        params, plain_params = cases.make_params("cpu"), cases.make_params("cpu")
        streamed, plain = cases.two_groups(params), cases.two_groups(plain_params)
        streamed.pipeline = _StreamedOnCpu(cuda, split=True, staging=ring,
                                           **cases.SMALL_BATCHES)
        cases.assert_same(cases.run_steps(streamed, params, steps=2),
                          cases.run_steps(plain, plain_params, steps=2))
    finally:
        torch._foreach_copy_ = foreach_copy
    assert copies == []
    assert cuda.log[:len(kernel_log)] == kernel_log     # the first step's, as "kernel"
    pieces = streamed.pipeline.batches(list(enumerate(params)))
    chunks = [sum(-(-(p.stop - p.start) * 4 // CHUNK_BYTES) for p in batch)
              for batch in pieces]
    expected = [2 * chunks[0], 2 * chunks[1]] + [
        chunks[n] + (2 * chunks[n + 2] if n + 2 < len(chunks) else 0)
        for n in range(len(chunks))]
    assert [n for n in streamed.pipeline.kernel.launches] == [n for n in expected if n] * 2


def _strided_run(make_pipeline, steps=3):
    """OffloadAdam over a transposed weight (not contiguous), a weight given transposed
    gradients, and two plain ones, against OffloadAdam over contiguous copies of the same
    numbers with contiguous gradients: ``(parameters, reference parameters, optimizer,
    reference optimizer)`` after ``steps``."""
    g = torch.Generator().manual_seed(3)
    ours = [torch.nn.Parameter(torch.randn(500, 300, generator=g).t()),
            torch.nn.Parameter(torch.randn(400, 200, generator=g)),
            torch.nn.Parameter(torch.randn(7, generator=g)),
            torch.nn.Parameter(torch.randn(2 * PIECE_ALIGNMENT + 5, generator=g))]
    plain_params = [torch.nn.Parameter(p.detach().contiguous().clone()) for p in ours]
    optimizer, plain = OffloadAdam(ours, lr=0.01), OffloadAdam(plain_params, lr=0.01)
    if make_pipeline is not None:
        optimizer.pipeline = make_pipeline()
    for _ in range(steps):
        grads = [torch.randn(p.shape, generator=g) for p in ours]
        grads[1] = torch.randn(200, 400, generator=g).t()      # not contiguous
        for p, q, grad in zip(ours, plain_params, grads):
            p.grad, q.grad = grad, grad.contiguous()
        optimizer.step()
        plain.step()
    assert [plain_layout(p) for p in ours] == [False, False, True, True]
    assert all(plain_layout(q) for q in plain_params)
    return ours, plain_params, optimizer, plain


def _assert_strided_run_exact(ours, plain_params, optimizer, plain):
    cases.assert_same([p.detach() for p in ours], [q.detach() for q in plain_params])
    cases.assert_same_state(cases.state_copy(optimizer, ours),
                            cases.state_copy(plain, plain_params))


def test_a_cpu_parameter_or_gradient_not_contiguous_is_updated_by_index():
    """A CPU parameter updated in place by torch's fused CPU Adam, which pairs the
    parameter, gradient and state elements by memory order: a transposed weight beside
    contiguous state, or a transposed gradient, would pair other elements (torch's own
    ``Adam(fused=True)`` does so with such a gradient). Those go through host buffers;
    every number, state included, is the contiguous copies'."""
    _assert_strided_run_exact(*_strided_run(None))


def test_the_table_transfer_copies_what_it_cannot_move_and_moves_the_rest():
    """The transposed weight and the transposed gradient of :func:`_strided_run` under
    transfer="table": ``_foreach_copy_`` takes their pieces in the same launches, the
    table the others; the numbers are the contiguous copies', bit for bit."""
    copies = []
    foreach_copy = torch._foreach_copy_

    def counted(targets, sources):
        copies.append([tuple(t.shape) for t in targets])
        foreach_copy(targets, sources)

    torch._foreach_copy_ = counted
    try:
        run = _strided_run(lambda: _StreamedOnCpu(
            _StandInCuda(), split=True, staging=StagingRing(slots=2, transfer="table"),
            **cases.SMALL_BATCHES))
    finally:
        torch._foreach_copy_ = foreach_copy
    _assert_strided_run_exact(*run)
    assert {shape for call in copies for shape in call} == {(300, 500), (400, 200)}
    assert run[2].pipeline.kernel.launches


@pytest.mark.skipif(__import__("importlib").util.find_spec("triton") is None,
                    reason="needs Triton")
def test_the_table_kernel_compiles_for_the_gpu_with_16_byte_moves_where_aligned():
    """The kernel compiles for an H100/H200 (sm_90) here, without a GPU: aligned, its
    whole blocks load and store 16 bytes a thread (``v4.b32``); unaligned or with
    2-byte words, it moves word by word."""
    import re

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from unified_opt.backends.torch.move_kernel import move
    from unified_opt.backends.torch.moves import BLOCK

    signature = {"jobs": "*i64", "addresses": "*i64", "T": "constexpr", "WORD": "constexpr",
                 "ALIGNED": "constexpr", "BLOCK": "constexpr"}

    def moves(word, aligned):
        kernel = triton.compile(
            ASTSource(move, signature, {"T": getattr(tl, f"int{8 * word}"), "WORD": word,
                                        "ALIGNED": aligned, "BLOCK": BLOCK}),
            target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        return set(re.findall(r"(?:ld|st)\.global\.[.\w]+", kernel.asm["ptx"]))

    assert {"ld.global.v4.b32", "st.global.v4.b32"} <= moves(4, True)
    assert not any(".v4." in m for m in moves(4, False))
    assert {"ld.global.b16", "st.global.b16"} <= moves(2, False)


#: each streamed loop's stagings: copy engines (a buffer per parameter, a ring) and
#: kernel transfers (rings of 2 and 3 slots)
LAZY_STAGINGS = {"per-parameter": HostStaging,
                 "ring-of-2": lambda: StagingRing(slots=2),
                 "kernel-ring-of-2": lambda: StagingRing(slots=2, transfer="kernel"),
                 "kernel-ring-of-3": lambda: StagingRing(slots=3, transfer="kernel"),
                 "table-ring-of-3": lambda: StagingRing(slots=3, transfer="table")}


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
    params, plain_params = cases.make_params("cpu"), cases.make_params("cpu")
    streamed, plain = cases.two_groups(params), cases.two_groups(plain_params)
    streamed.pipeline = _StreamedOnCpu(cuda, split=True, staging=make_staging(),
                                       **cases.SMALL_BATCHES)
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
            for p, q, g in zip(params, plain_params, cases.grads_at(t)):
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
    cases.assert_same([p.detach() for p in params], [p.detach() for p in plain_params])
    cases.assert_same_state(cases.state_copy(streamed, params),
                            cases.state_copy(plain, plain_params))


def test_a_kernel_ring_of_two_slots_brings_each_batch_down_after_the_last_went_up():
    log, batches = _streamed_log(StagingRing(slots=2, transfer="kernel"))
    assert [e for e in log if e != "update"] == (
        ["up waits for caller", "record 0 on up"]
        + [e for b in range(batches) for e in [f"synchronize {b % 2}"]
           + ([f"record {(b + 1) % 2} on up"] if b + 1 < batches else [])]
        + ["caller waits for up"])


def _ring_pipeline(slots, split=True):
    """CPU parameters with gradients, and a staged pipeline over a ring of ``slots``."""
    params = cases.make_params("cpu")
    for p, g in zip(params, cases.grads_at(0)):
        p.grad = g
    ring = StagingRing(slots=slots)
    return params, ring, HostPipeline(split=split, stage_cpu=True, staging=ring,
                                      **cases.SMALL_BATCHES)


@pytest.mark.parametrize("transfer", TRANSFERS)
def test_a_failed_update_still_orders_the_caller_after_the_queued_uploads(transfer):
    cuda = _StandInCuda()
    params = cases.make_params("cpu")
    for p, g in zip(params, cases.grads_at(0)):
        p.grad = g
    pipeline = _StreamedOnCpu(cuda, split=True, staging=StagingRing(transfer=transfer),
                              **cases.SMALL_BATCHES)
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
    HostPipeline(stage_cpu=True, staging=ring, **cases.SMALL_BATCHES).batches(list(enumerate(big)))
    assert ring.pinned()[0].numel() == 2 * 5 * PIECE_ALIGNMENT * 4 > size   # whole: grown
    assert len(ring.pinned()) == 3
    fresh = StagingRing(slots=3)        # one batch: one slot
    HostPipeline(stage_cpu=True, staging=fresh, **cases.SMALL_BATCHES).batches(list(enumerate(big)))
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
     "StagingRing: transfer must be one of ('copy-engine', 'kernel', 'table'), got 1 of "
     "type int"),
    (StagingRing, {"transfer": "dma"}, ValueError,
     "StagingRing: transfer must be one of ('copy-engine', 'kernel', 'table'), got 'dma'"),
    (StagingRing, {"transfer": "kernel", "pinning": "register"}, ValueError,
     "transfer='kernel' needs pinning='alloc' (a registered page may have another "
     "address on the device), got 'register'"),
    (StagingRing, {"transfer": "table", "pinning": "register"}, ValueError,
     "transfer='table' needs pinning='alloc' (a registered page may have another "
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


def test_a_table_transfer_without_triton_is_refused(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else find_spec(name, *a))
    with pytest.raises(ValueError, match=r"^transfer='table' needs Triton \(its kernel is "
                                         r"Triton's\); install triton, or take "
                                         r"transfer='kernel'$"):
        StagingRing(transfer="table")
