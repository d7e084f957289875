"""The Works of the strait ProcessGroup (backend.py): what Python callers and C++ callers get, the
thread that completes their futures, and the torch profiler spans of the operations.

Python callers (torch's API with ``async_op=True``) get a ``StraitWork``. C++ callers (DDP's
Reducer, ``_broadcast_coalesced``, ``_verify_params_across_processes``) cannot see a Python Work
in torch 1.13 (see ``_compat``); ``cpp_work`` hands them a C++ Work over a torch Future instead:
- ``STRAIT_TORCH_CPP_WORK=pending`` (the default): the Future is still pending when the call
  returns and the group's completer thread fulfils it when strait finishes the operation, so the
  Reducer's bucket allreduces run while backward computes the next gradients (overlap). Errors
  reach the C++ waiter as a real exception (``_unwrap``); the operation's buffers stay referenced
  by its StraitWork, which the completer holds until the operation has finished; the group's
  timeout bounds the completer's wait, so every C++ wait ends within it; the completer finishes
  operations in submission order. The completer takes the GIL to fulfil a Future, so a C++
  caller must not wait while holding it (torch's own callers release it).
  With the compiled extension (``_strait_torch``, python/ext/strait_torch.cpp, built next to
  libstrait.so when libtorch-dev is present), the Work is a C++ one and a C++ thread completes its
  future: no Python object per operation and no GIL on completion (the Python path costs DDP's
  autograd thread 230 - 430 us a bucket). Operations with a Python copy-out, and every operation
  while a torch profiler records (its spans are Python's), take the Python path.
- ``python``: pending, completed in Python even when the extension is there (to compare).
- ``finished``: the call finishes the operation first (no overlap; the path before torch's
  FutureWrappingWork was used pending), kept to compare against.

Why a completer thread rather than a completion callback from strait's progress thread: the
callback would run Python (take the GIL) on the thread that moves every rank's bytes, stalling it
behind the training loop's Python; the thread hop costs tens of microseconds per operation, next
to a DDP bucket's milliseconds, and the C API has no callback.

Profiler spans: while a torch profiler records (``torch.autograd._profiler_enabled()``), every
operation is a ``record_function`` span named ``strait::<operation> bytes=<N>`` (N: the bytes of
its output tensors; for send, of the sent tensor) from its submission to its completion (ended
through the Work's future, see span_until_done). Without a profiler the cost is that one check.
"""

import os
import threading

import torch
import torch.distributed as dist
from torch.autograd.profiler import record_function

from .. import _capi as C
from . import _compat

__all__ = ["StraitWork", "DONE", "Completer", "cpp_work", "cpp_work_mode", "extension",
           "profiling", "span_begin", "span_end", "span_until_done", "error"]

_WAIT = C.straitWait
_TEST = C.straitTest
_FREE = C.straitRequestFree

_CPP_WORK_MODES = ("pending", "python", "finished")

profiling = getattr(torch.autograd, "_profiler_enabled", None) or (lambda: False)


def cpp_work_mode():
    """STRAIT_TORCH_CPP_WORK: "pending" (default), "python" or "finished"; anything else is
    refused."""
    mode = os.environ.get("STRAIT_TORCH_CPP_WORK", "").strip().lower() or "pending"
    if mode not in _CPP_WORK_MODES:
        raise ValueError(f"strait: STRAIT_TORCH_CPP_WORK={mode!r} is not one of "
                         f"{', '.join(_CPP_WORK_MODES)}; unset it for pending (DDP overlap)")
    return mode


def _load_extension():
    """The compiled _strait_torch built for this torch (major.minor) from libstrait.so's folder,
    and why not when it is absent (None, reason)."""
    import importlib.util
    major_minor = ".".join(str(v) for v in _compat.TORCH_VERSION)
    path = os.path.join(os.path.dirname(os.path.abspath(C.library_path)),
                        f"_strait_torch.torch{major_minor}.so")
    if not os.path.exists(path):
        return None, f"{path} does not exist (built when libtorch-dev is installed)"
    try:
        spec = importlib.util.spec_from_file_location("_strait_torch", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as e:
        return None, f"{path} does not load: {e}"
    return module, None


_extension = None


def extension():
    """(module or None, reason it is None): loaded once, on first use."""
    global _extension
    if _extension is None:
        _extension = _load_extension()
    return _extension


def _nbytes(tensors):
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(_nbytes(t) for t in tensors or ())


def span_begin(name, tensors):
    """Opens the profiler span of an operation; call only while profiling()."""
    nbytes = _nbytes(tensors)
    span = record_function(f"strait::{name} bytes={nbytes}", f"bytes={nbytes}")
    span.__enter__()
    return span


def span_end(span):
    """Closes a span on this thread (the one that opened it)."""
    span.__exit__(None, None, None)


def span_until_done(span, work):
    """Closes the span when ``work`` ends, on whichever thread completes it: through its future,
    as torch's profiler needs for an end on another thread (it carries the profiler's
    thread-local state there; a plain exit on a thread without it records no end)."""
    span._call_end_callbacks_on_future(work._raw_future())


def error(rc, request, name):
    """The StraitError of a failed request (strait's whole message)."""
    raw = C.straitRequestGetError(request) if request else None
    detail = raw.decode("utf-8", "replace") if raw else C.error_string(rc)
    return C.StraitError(rc, f"strait: {name} failed: {detail}")


def _unwrap(fut):
    # A then() callback that raises gives the chained future a real error, which C++ waiters
    # (DDP's Reducer) see; Future.set_exception in torch 1.13 only sets a Python-side value.
    value = fut.value()
    if isinstance(value, BaseException):
        raise value
    return value


class StraitWork(dist.Work):
    """One operation in flight.

    wait(timeout=None): blocks until the operation has finished; returns True, or raises
        StraitError (a RuntimeError) with strait's message (operation, sequence number, ranks,
        cause). A ``timeout`` (timedelta > 0) gives up after that long: the operation then fails
        with straitTimeout and the group is unusable (strait cannot abandon one operation and go
        on). Without one, the group's timeout (init_process_group's) bounds the wait.
    is_completed(): never blocks. exception(): the error once failed, else None.
    get_future(): a torch.futures.Future completed with the list of output tensors (or with the
        error), from a completion thread of the group.
    result(): the output tensors.
    """

    def __init__(self, pg, request, keep, result, post, name):
        super().__init__()
        self._pg = pg
        self._req = request
        self._keep = keep
        self._result = result
        self._post = post
        self._name = name
        self._done = False
        self._exc = None
        self._raw = None
        self._fut = None

    def _complete(self, rc):
        """Records how the operation ended (once), runs its copy-out, completes the future."""
        with self._pg._lock:
            if self._done:
                return
            if rc == C.SUCCESS:
                if self._post is not None:
                    try:
                        self._post()
                    except Exception as e:  # a copy-out of ours failing is a bug: report it
                        self._exc = RuntimeError(f"strait: {self._name}: copying the result "
                                                 f"out failed: {e}")
            else:
                self._exc = error(rc, self._req, self._name)
            self._done = True
            if self._exc is not None and rc != C.SUCCESS:
                # A peer may still be writing into a failed operation's buffers (UCX cannot
                # cancel a receive in flight): keep them until the communicator is destroyed.
                self._pg._failed_buffers.append(self._keep)
            self._keep = None
            raw = self._raw
        if raw is not None:
            raw.set_result(self._exc if self._exc is not None else self._result)

    def wait(self, timeout=None):
        if not self._done:
            ms = C.WAIT_DEADLINE
            if timeout is not None:
                ms = int(timeout.total_seconds() * 1000)
                if ms <= 0:  # c10d's kNoTimeout is 0
                    ms = C.WAIT_DEADLINE
            self._complete(_WAIT(self._req, ms))
        if self._exc is not None:
            raise self._exc
        return True

    def is_completed(self):
        if not self._done:
            rc = _TEST(self._req)
            if rc == C.IN_PROGRESS:
                return False
            self._complete(rc)
        return True

    def is_success(self):
        return self.is_completed() and self._exc is None

    def exception(self):
        return self._exc

    def result(self):
        return self._result

    def source_rank(self):
        """The sender's rank of a receive from any source (recv/irecv without src)."""
        from . import _p2p  # _p2p builds on the group, which builds on this module
        return _p2p.source_rank(self)

    _source_rank = source_rank  # the name torch 1.13's dist.recv(src=None) calls

    def synchronize(self):
        pass

    def get_future(self):
        if self._fut is None:
            self._fut = self._raw_future().then(_unwrap)
        return self._fut

    def _raw_future(self):
        """The future completed with the result or the error (as a value) when the operation
        ends: by _complete, on the completer thread unless a wait() comes first."""
        if self._raw is None:
            raw = torch.futures.Future()
            if self._done:  # final once set: no lock needed (the shared DONE has no group)
                raw.set_result(self._exc if self._exc is not None else self._result)
                self._raw = raw
                return raw
            with self._pg._lock:
                done = self._done
                if not done:
                    self._raw = raw
            if done:
                raw.set_result(self._exc if self._exc is not None else self._result)
                self._raw = raw
            else:
                self._pg._completer().put(self)
        return self._raw

    def __del__(self):
        try:
            if self._req:
                if self._done:
                    _FREE(self._req)
                else:  # still running: its buffers must outlive it (see _reap)
                    self._pg._orphans.append((self._req, self._keep))
                self._req = None
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def _done_work():
    work = StraitWork(None, None, None, [], None, "finished")
    work._done = True
    return work


# The Work of every operation done by a blocking C call (torch's async_op=False path, which
# waits on it and drops it): one shared, already finished Work instead of one per call.
DONE = _done_work()


class Completer:
    """A daemon thread that completes the futures of Works, in submission order (strait finishes
    a group's collectives in that order; a future of a send/recv can be completed late when a
    collective submitted before it waits on a peer)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._queue = []
        self._thread = threading.Thread(target=self._run, name="strait-completer", daemon=True)
        self._thread.start()

    def put(self, work):
        with self._cv:
            self._queue.append(work)
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                work = self._queue.pop(0)
            if work is None:
                return
            if not work._done:
                work._complete(_WAIT(work._req, C.WAIT_DEADLINE))  # ctypes drops the GIL

    def stop(self):
        self.put(None)


def cpp_work(work, pending):
    """The C++ Work a C++ caller gets for ``work``: over its pending future (``pending``), or,
    once the operation has finished here (raising its error), over a completed one."""
    if pending:
        return _compat.work_from_future(work.get_future())
    work.wait()
    return _compat.work_from_completed_future(work.result())
