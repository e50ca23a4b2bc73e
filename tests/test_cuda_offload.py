"""OffloadAdam's pipelined transfers on a CUDA device (skipped without one): the same
numbers as the class on the CPU, bit for bit, no optimizer state on the GPU, the ring's
ordering on real streams, and ``update_on="device"``. The loop's order is also tested
on the CPU (tests/test_offload_loops.py)."""

import pytest
from conftest import require

pytestmark = require("torch")
torch = pytest.importorskip("torch")
import offload_cases as cases  # noqa: E402

from unified_opt.backends.torch.offload import OffloadAdam  # noqa: E402
from unified_opt.backends.torch.pipeline import (  # noqa: E402
    PIECE_ALIGNMENT,
    HostPipeline,
)
from unified_opt.backends.torch.staging import (  # noqa: E402
    TRANSFERS,
    HostStaging,
    StagingRing,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _device_bytes_the_steps_allocate(optimizer, params) -> int:
    """``cases.STEPS`` steps, each gradient written into a tensor allocated before them; the
    device memory the steps left allocated."""
    for p in params:
        p.grad = torch.zeros_like(p)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for t in range(cases.STEPS):
        for p, g in zip(params, cases.grads_at(t)):
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
                                ("kernel", {**base, "transfer": "kernel"}),
                                ("table", {**base, "transfer": "table"})]
            if how not in ("kernel", "table") or make is StagingRing]


@needs_cuda
@pytest.mark.parametrize("make_staging, kwargs", [s[1:] for s in STAGINGS],
                         ids=[s[0] for s in STAGINGS])
@pytest.mark.parametrize("batches", [cases.SMALL_BATCHES, {}], ids=["small-batches", "default"])
def test_cuda_pipelined_offload_adam_is_the_cpu_one_bit_for_bit(batches, make_staging,
                                                                kwargs):
    cpu_params, cuda_params = cases.make_params("cpu"), cases.make_params("cuda")
    on_cpu, on_cuda = cases.two_groups(cpu_params), cases.two_groups(cuda_params)
    staging = make_staging(**kwargs)
    on_cuda.pipeline = HostPipeline(split=True, staging=staging, **batches)
    assert _device_bytes_the_steps_allocate(on_cuda, cuda_params) == 0
    cases.assert_same([p.detach().cpu() for p in cuda_params], cases.run_steps(on_cpu, cpu_params))
    states = cases.state_copy(on_cuda, cuda_params)
    assert all(v.device.type == "cpu" for s in states for v in s.values())
    # the copies' buffers pinned, the state (the host's alone) pageable
    assert staging.pinned() and all(b.is_pinned() for b in staging.pinned() if b.numel())
    assert not any(v.is_pinned() for p in cuda_params for v in on_cuda.state[p].values())
    cases.assert_same_state(states, cases.state_copy(on_cpu, cpu_params))


@needs_cuda
def test_cuda_default_offload_adam_is_the_cpu_one_bit_for_bit():
    """What ``OffloadAdam(params)`` builds (kernel transfers, batches of 2**21: SHAPES fit
    in two batches) over several steps, no state on the GPU."""
    cpu_params, cuda_params = cases.make_params("cpu"), cases.make_params("cuda")
    on_cpu, on_cuda = cases.two_groups(cpu_params), cases.two_groups(cuda_params)
    assert on_cuda.pipeline.staging.transfer == "kernel"
    assert _device_bytes_the_steps_allocate(on_cuda, cuda_params) == 0
    cases.assert_same([p.detach().cpu() for p in cuda_params],
                      cases.run_steps(on_cpu, cpu_params))
    cases.assert_same_state(cases.state_copy(on_cuda, cuda_params),
                            cases.state_copy(on_cpu, cpu_params))


@needs_cuda
def test_cuda_kernel_transfer_pieces_address_the_slot_s_pinned_bytes():
    params = cases.make_params("cuda")
    for p in params:
        p.grad = torch.randn_like(p)
    pipeline = HostPipeline(split=True, staging=StagingRing(transfer="kernel"),
                            **cases.SMALL_BATCHES)
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
    cpu_params, cuda_params = cases.make_params("cpu"), cases.make_params("cuda")
    on_cpu, on_cuda = cases.two_groups(cpu_params), cases.two_groups(cuda_params)
    on_cuda.pipeline = HostPipeline(split=True,
                                    staging=StagingRing(slots=2, transfer=transfer),
                                    **cases.SMALL_BATCHES)
    run = on_cuda.pipeline.run

    def run_holding_the_uploads(params, update):
        def update_then_hold_the_uploads(batch):
            update(batch)
            # the uploads' stream: "up" for the copy engines, the one side stream of
            # the kernel transfer
            (_, up), = on_cuda.pipeline._streams.values()
            with torch.cuda.stream(up):
                torch.cuda._sleep(20_000_000)          # about 10 ms on the GPU

        run(params, update_then_hold_the_uploads)

    on_cuda.pipeline.run = run_holding_the_uploads      # SHAPES: 7 batches, 2 slots
    cases.assert_same(cases.run_steps(on_cuda, cuda_params), cases.run_steps(on_cpu, cpu_params))


@needs_cuda
@pytest.mark.parametrize("transfer", TRANSFERS)
def test_cuda_offload_adam_reads_a_value_changed_on_the_device(transfer):
    cpu_params, cuda_params = cases.make_params("cpu"), cases.make_params("cuda")
    on_cpu, on_cuda = OffloadAdam(cpu_params, lr=0.01), OffloadAdam(cuda_params, lr=0.01)
    on_cuda.pipeline = HostPipeline(split=True, staging=StagingRing(transfer=transfer),
                                    **cases.SMALL_BATCHES)
    for step in range(3):
        for p, g in zip(cuda_params, cases.grads_at(step)):
            p.grad = g.cuda()
        for p, g in zip(cpu_params, cases.grads_at(step)):
            p.grad = g
        on_cuda.step()
        on_cpu.step()
        with torch.no_grad():                   # e.g. a weight edited between steps
            cuda_params[0].mul_(0.5)
            cpu_params[0].mul_(0.5)
    cases.assert_same([p.detach().cpu() for p in cuda_params], [p.detach() for p in cpu_params])


@needs_cuda
@pytest.mark.parametrize("transfer", TRANSFERS)
def test_cuda_pipeline_results_are_ordered_before_later_work_on_the_stream(transfer):
    """A kernel queued right after the step (no synchronize) sees the new values, and the
    next step's downloads see the caller's writes: run on a non-default stream."""
    params = [torch.nn.Parameter(torch.zeros(4 * PIECE_ALIGNMENT + 1, device="cuda"))
              for _ in range(3)]
    pipeline = HostPipeline(split=True, staging=StagingRing(transfer=transfer),
                            **cases.SMALL_BATCHES)
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
    ours, theirs = cases.make_params("cuda"), cases.make_params("cuda")
    offload, adam = cases.two_groups(ours, update_on="device"), _fused_cuda_adam(theirs)
    assert _device_bytes_the_steps_allocate(offload, ours) == 0     # no state on the GPU
    cases.assert_same([p.detach().cpu() for p in ours], cases.run_steps(adam, theirs))
    states = cases.state_copy(offload, ours)
    assert all(v.device.type == "cpu" for s in states for v in s.values())
    assert all(v.is_pinned() for p in ours for v in offload.state[p].values() if v.numel())
    cases.assert_same_state(states, [{k: v.cpu() for k, v in s.items()}
                                     for s in cases.state_copy(adam, theirs)])


@needs_cuda
def test_cuda_update_on_the_device_resumes_from_a_state_dict():
    ours, theirs = cases.make_params("cuda"), cases.make_params("cuda")
    offload, adam = cases.two_groups(ours, update_on="device"), _fused_cuda_adam(theirs)
    cases.run_steps(offload, ours, steps=2)
    cases.run_steps(adam, theirs, steps=2)
    saved = offload.state_dict()
    resumed = cases.two_groups(ours, update_on="device")
    resumed.load_state_dict(saved)          # pageable host copies: pinned at the next step
    for t in range(2, cases.STEPS):
        for p, q, g in zip(ours, theirs, cases.grads_at(t)):
            p.grad, q.grad = g.cuda(), g.cuda()
        resumed.step()
        adam.step()
    cases.assert_same([p.detach().cpu() for p in ours], [p.detach().cpu() for p in theirs])
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
    on_gpu, on_cpu = cases.make_params("cuda"), cases.make_params("cpu", seed=1)
    mixed = [p for pair in zip(on_gpu, on_cpu) for p in pair]
    offload = OffloadAdam(mixed, lr=0.01, update_on="device")
    ref_gpu, ref_cpu = cases.make_params("cuda"), cases.make_params("cpu", seed=1)
    adam_gpu = torch.optim.Adam(ref_gpu, lr=0.01, fused=True)
    adam_cpu = torch.optim.Adam(ref_cpu, lr=0.01, fused=True)
    for t in range(cases.STEPS):
        for ps, device in ((on_gpu, "cuda"), (on_cpu, "cpu"), (ref_gpu, "cuda"),
                           (ref_cpu, "cpu")):
            for p, g in zip(ps, cases.grads_at(t)):
                p.grad = g.to(device)
        offload.step()
        adam_gpu.step()
        adam_cpu.step()
    cases.assert_same([p.detach().cpu() for p in on_gpu], [p.detach().cpu() for p in ref_gpu])
    cases.assert_same([p.detach() for p in on_cpu], [p.detach() for p in ref_cpu])
    assert all(v.is_pinned() for p in on_gpu for v in offload.state[p].values() if v.numel())
    assert not any(v.is_pinned() for p in on_cpu for v in offload.state[p].values())


@needs_cuda
@pytest.mark.parametrize("transfer", TRANSFERS)
def test_cuda_offload_of_strided_weights_and_gradients_is_the_contiguous_one(transfer):
    """A transposed CUDA weight and a transposed gradient (the table copies their pieces
    through views, the other transfers too) beside plain ones: the numbers of OffloadAdam
    over contiguous CPU copies, bit for bit."""
    g = torch.Generator().manual_seed(5)
    made = [torch.randn(500, 300, generator=g).t(), torch.randn(400, 200, generator=g),
            torch.randn(7, generator=g), torch.randn(2 * PIECE_ALIGNMENT + 5, generator=g)]
    ours = [torch.nn.Parameter(m.cuda()) for m in made]
    ours[0] = torch.nn.Parameter(made[0].t().contiguous().cuda().t())     # strided on CUDA
    plain = [torch.nn.Parameter(m.contiguous().clone()) for m in made]
    on_cuda, on_cpu = OffloadAdam(ours, lr=0.01), OffloadAdam(plain, lr=0.01)
    on_cuda.pipeline = HostPipeline(split=True, staging=StagingRing(transfer=transfer),
                                    **cases.SMALL_BATCHES)
    for _ in range(3):
        grads = [torch.randn(m.shape, generator=g) for m in made]
        grads[1] = torch.randn(200, 400, generator=g).t()
        for p, q, grad in zip(ours, plain, grads):
            p.grad, q.grad = grad.cuda(), grad.contiguous()
        on_cuda.step()
        on_cpu.step()
    assert not ours[0].is_contiguous() and not ours[1].grad.is_contiguous()
    cases.assert_same([p.detach().cpu() for p in ours], [q.detach() for q in plain])
