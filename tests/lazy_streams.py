"""A stand-in for ``torch.cuda``'s streams and events under which the pipeline's copies
run as late as the waits allow, the caller's work as early, and a kernel's copies in
the worst order.

:class:`.pipeline.HostPipeline`'s streamed loops pass their ``cuda`` module in, so a CPU
test can run them over CPU tensors: a copy queued on a side stream (``copy_(...,
non_blocking=True)`` or ``torch._foreach_copy_``) runs only when the host waits for an
event recorded after it, when another stream's queued wait needs it, or at
:meth:`LazyCuda.synchronize`; work queued on the caller's stream runs as soon as its
waits allow. A loop that does not order a download into a slot after the upload out
of it, or the caller's later work after the uploads, then computes other numbers, as a
GPU would at times. The pairs of one ``_foreach_copy_`` (one kernel, its blocks in no
set order) run last to first: the downloads a kernel also carries before its uploads.
"""

from __future__ import annotations

import contextlib

import torch


class LazyStream:
    """Queued work: ``("run", fn)`` or ``("after", stream, position)``, run in order, only
    as far as something needs."""

    def __init__(self, name: str, eager: bool = False) -> None:
        self.name, self.queue, self.done, self.eager = name, [], 0, eager

    def enqueue(self, fn) -> None:
        """Queue ``fn`` (run at once on an eager stream, once its waits are met)."""
        self._append(("run", fn))

    def _append(self, op) -> None:
        self.queue.append(op)
        if self.eager:
            self.run_to(len(self.queue))

    def run_to(self, position: int) -> None:
        while self.done < position:
            kind, *args = self.queue[self.done]
            self.done += 1
            if kind == "run":
                args[0]()
            else:
                stream, at = args
                stream.run_to(at)

    def wait_stream(self, other: LazyStream) -> None:
        self._append(("after", other, len(other.queue)))

    def wait_event(self, event: LazyEvent) -> None:
        self._append(("after", event.stream, event.position))


class LazyEvent:
    def __init__(self) -> None:
        self.stream, self.position = None, 0

    def record(self, stream: LazyStream) -> None:
        self.stream, self.position = stream, len(stream.queue)

    def synchronize(self) -> None:
        if self.stream is not None:
            self.stream.run_to(self.position)


class LazyCuda:
    """The parts of ``torch.cuda`` the pipeline calls. Use as a context manager: inside,
    copies queued while a stream other than ``caller`` (the eager one) is current are
    deferred. :meth:`Stream` makes lazy streams: the pipeline's, or a caller's whose
    work waits like a side stream's."""

    Event = LazyEvent

    def __init__(self) -> None:
        self.caller = LazyStream("caller", eager=True)
        self.current = self.caller
        self.streams: list[LazyStream] = [self.caller]
        self._patches = contextlib.ExitStack()

    def device(self, device):
        return contextlib.nullcontext()

    def current_stream(self, device=None) -> LazyStream:
        return self.current

    def Stream(self, device=None) -> LazyStream:  # noqa: N802 (torch.cuda's name)
        stream = LazyStream(f"side {len(self.streams)}")
        self.streams.append(stream)
        return stream

    @contextlib.contextmanager
    def stream(self, stream: LazyStream):
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def synchronize(self) -> None:
        """Run everything queued (``torch.cuda.synchronize``)."""
        for stream in self.streams:
            stream.run_to(len(stream.queue))

    def _deferred(self) -> bool:
        return self.current is not self.caller

    def __enter__(self) -> LazyCuda:
        copy, foreach_copy = torch.Tensor.copy_, torch._foreach_copy_

        def lazy_copy(target, source, non_blocking=False):
            if not (non_blocking and self._deferred()):
                return copy(target, source, non_blocking)
            self.current.enqueue(lambda: copy(target, source))
            return target

        def lazy_foreach_copy(targets, sources):
            if not self._deferred():
                return foreach_copy(targets, sources)
            pairs = list(zip(targets, sources))[::-1]
            self.current.enqueue(lambda: [copy(t, s) for t, s in pairs])
            return None

        self._patches.enter_context(_patched(torch.Tensor, "copy_", lazy_copy))
        self._patches.enter_context(_patched(torch, "_foreach_copy_", lazy_foreach_copy))
        return self

    def __exit__(self, *exc) -> None:
        self._patches.close()


@contextlib.contextmanager
def _patched(owner, name, value):
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)
