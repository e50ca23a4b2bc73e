"""The Triton kernel of ``StagingRing(transfer="table")`` (:mod:`.moves`): byte ranges
copied between a parameter's device memory and a pinned ring slot, each read through a
table of addresses. Imported only where that transfer runs (it imports Triton)."""

import triton
import triton.language as tl


@triton.jit
def move(jobs, addresses, T: tl.constexpr, WORD: tl.constexpr, ALIGNED: tl.constexpr,
         BLOCK: tl.constexpr):
    """One program per job row ``(source column, source byte offset, target column,
    target byte offset, bytes)``: a column is an entry of ``addresses`` (column 0 holds 0,
    so an offset there is an address itself). ``T`` is a ``WORD``-byte integer dividing
    every address and length; with ``ALIGNED`` every address is a multiple of 16 bytes,
    so the whole blocks load and store as 16-byte vectors and only the tail is masked."""
    row = jobs + tl.program_id(0) * 5
    source = tl.load(addresses + tl.load(row)) + tl.load(row + 1)
    target = tl.load(addresses + tl.load(row + 2)) + tl.load(row + 3)
    words = tl.load(row + 4) // WORD
    src = source.to(tl.pointer_type(T))
    dst = target.to(tl.pointer_type(T))
    if ALIGNED:
        src = tl.multiple_of(src, 16)
        dst = tl.multiple_of(dst, 16)
    whole = words // BLOCK * BLOCK
    k = tl.arange(0, BLOCK)
    for k0 in range(0, whole, BLOCK):
        tl.store(dst + k0 + k, tl.load(src + k0 + k))
    tail = whole + k
    tl.store(dst + tail, tl.load(src + tail, mask=tail < words), mask=tail < words)
