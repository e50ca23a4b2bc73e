"""``StagingRing(transfer="table")``: a batch's transfers as one Triton kernel reading a
table of addresses (:func:`.move_kernel.move`), where ``transfer="kernel"`` calls
``torch._foreach_copy_`` over views made each step.

Per plan (the pipeline's batches, kept between steps) each launch's job rows are made
once and kept in pinned host memory the device reads: for every piece, its value and
gradient coming down into its slot and its value going up, cut into :data:`CHUNK_BYTES`
rows. A row names the parameter or gradient by a column of the step's address table, so
the gradients (fresh tensors each step) cost one small copy of their addresses a step,
not a view and a list entry per piece and launch. A piece the table cannot move (a
parameter or gradient not contiguous, a gradient of another dtype) is left to the
pipeline's ``torch._foreach_copy_`` in the same launch's turn, through views as
``transfer="kernel"`` makes them.

Measured (``benchmarks/offload_probe.py``, GPT-2 small, batches of 2**21): slower than
``transfer="kernel"``, because a Triton launch from Python costs the host more than
``torch._foreach_copy_`` over the batch's views: on an H100 3.5 and 4.3 ms a step
queueing 62 launches against 2.0 and 1.8 ms (steps 31.8 against 28.8 ms and 32.8 against
26.4 ms), on an H200 1 to 3% slower in three probes. It stays an option, not the default.
"""

from __future__ import annotations

import numpy as np
import torch

from .staging import mapped_on_device

#: bytes a job row moves at most (one Triton program): a multiple of 16, so that a row
#: starts as aligned as its piece
CHUNK_BYTES = 1 << 16
#: words a program moves per iteration
BLOCK = 1024


def plain_layout(p) -> bool:
    """Whether ``p`` and its gradient are contiguous, of one dtype and shape: their bytes
    are the elements in order, as in a host buffer (what the table moves byte for byte,
    and what a host update may run on in place beside contiguous state)."""
    grad = p.grad
    return (p.is_contiguous() and grad.is_contiguous() and grad.dtype == p.dtype
            and grad.shape == p.shape)


def _alignment(values: np.ndarray) -> int:
    """16, 4, 2 or 1: the largest of these dividing every value (an address, offset or
    length in bytes)."""
    g = int(np.gcd.reduce(values)) if values.size else 0
    return next(a for a in (16, 4, 2, 1) if g % a == 0)


class TableMoves:
    """One plan's job rows and each step's address table (see the module).

    ``batches``: the plan's batches of pieces (``mapped_value`` and ``mapped_grad``: the
    slot as the device addresses it) over ``params`` (one device); ``moved``: per
    parameter, whether the table moves it (:func:`plain_layout`); ``pairs``: the ``(up,
    down)`` batch numbers of the launches the loop makes (None: no batch that way)."""

    def __init__(self, batches, params: list, moved: list[bool], pairs) -> None:
        import triton.language as tl

        from .move_kernel import move

        self._move, self._types = move, {a: getattr(tl, f"int{8 * a}") for a in (1, 2, 4)}
        self.params, self.moved = params, moved
        self.device = params[0].device
        columns = {id(p): k for k, p in enumerate(params)}
        self._launches: dict[tuple, tuple] = {}
        for up, down in pairs:
            rows: list[tuple] = []
            unmoved: dict[str, list] = {"up": [], "down": []}   # the pipeline copies them
            for way, number in (("up", up), ("down", down)):
                for piece in batches[number] if number is not None else ():
                    if self.moved[columns[id(piece.param)]]:
                        self._rows(piece, columns[id(piece.param)], way, rows)
                    else:
                        unmoved[way].append(piece)
            jobs = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
            self._launches[(up, down)] = (
                self._placed(torch.from_numpy(jobs)) if len(jobs) else None,
                _alignment(jobs[:, [1, 3]].ravel()), _alignment(jobs[:, 4]),
                (unmoved["up"], unmoved["down"]))

    def _placed(self, jobs: torch.Tensor) -> torch.Tensor:
        """``jobs`` where the kernel reads them: on a CUDA device, pinned host memory as
        the device maps it (the steps then allocate no device memory, and each program
        reads its 40-byte row over the bus once)."""
        if self.device.type != "cuda":
            return jobs
        return mapped_on_device(jobs.pin_memory(), self.device)

    def _rows(self, piece, column: int, way: str, rows: list) -> None:
        """``piece``'s job rows one way."""
        size = piece.param.element_size()
        nbytes, offset = (piece.stop - piece.start) * size, piece.start * size
        value, grad = 1 + column, 1 + len(self.moved) + column   # its table columns
        if way == "up":
            ranges = [(0, piece.mapped_value.data_ptr(), value, offset)]
        else:
            ranges = [(value, offset, 0, piece.mapped_value.data_ptr()),
                      (grad, offset, 0, piece.mapped_grad.data_ptr())]
        for source, source_at, target, target_at in ranges:
            for at in range(0, nbytes, CHUNK_BYTES):
                rows.append((source, source_at + at, target, target_at + at,
                             min(CHUNK_BYTES, nbytes - at)))

    def addresses(self) -> tuple[torch.Tensor, int]:
        """The step's address table on the device (0, each parameter's address, each
        gradient's; 0 for one the table does not move), queued on the current stream
        from pinned memory (a fresh buffer each step: the allocators keep it until it is
        read), and the alignment of its addresses."""
        count = len(self.moved)
        table = np.zeros(1 + 2 * count, dtype=np.int64)
        table[1:1 + count] = [p.data_ptr() if m else 0
                              for p, m in zip(self.params, self.moved)]
        table[1 + count:] = [p.grad.data_ptr() if m else 0
                             for p, m in zip(self.params, self.moved)]
        host = torch.from_numpy(table)
        if self.device.type == "cuda":
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True), _alignment(table)

    def launch(self, addresses: tuple[torch.Tensor, int], up, down) -> tuple[list, list]:
        """The kernel of launch ``(up, down)`` over its rows, on the current stream; the
        pieces it does not move, ``(going up, coming down)``."""
        jobs, at, lengths, unmoved = self._launches[(up, down)]
        if jobs is not None:
            table, table_at = addresses
            aligned = min(at, table_at)       # of every address a row reads or writes
            word = min(aligned, lengths, 4)
            self._move[(jobs.shape[0],)](jobs, table, T=self._types[word], WORD=word,
                                         ALIGNED=aligned == 16, BLOCK=BLOCK, num_warps=4)
        return unmoved
