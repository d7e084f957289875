"""The strait ProcessGroup: torch.distributed's collectives over libstrait.so's C API (ctypes).

``import strait.torch`` registers it as backend "strait"; ``create_process_group`` is the
creation function torch calls (store, rank, size, timeout). The communicator bootstraps over the
c10d Store torch passes (no second port) and takes ``timeout`` as the deadline of every
operation: a collective a peer never joins, or a peer that dies, fails within it, naming the rank.

Tensors: dense and contiguous, all of one call on one device. Host tensors run on strait's host
path (UCX); CUDA tensors on its NCCL path, enqueued on ``torch.cuda.current_stream()``.
Reductions take float32, float64, float16, bfloat16, int32, int64, int8 and uint8 with SUM,
PRODUCT, MIN, MAX, AVG (floating point only) and BAND, BOR, BXOR (integers only); data movement
(broadcast, gathers, scatters, all-to-all, send/recv) takes any dtype, moved as bytes. The ops
in the modules beside this one: the coalesced all_gather forms and reduce_scatter_tensor_coalesced
(_coalesced), sparse COO all_reduce (_sparse), recv from any source, monitored_barrier,
batch_isend_irecv's coalescing hooks and the sequence number (_p2p), PREMUL_SUM for all_reduce
and reduce_scatter_tensor (_premul: torch keeps its factor in C++, so strait records it when
``dist._make_nccl_premul_sum`` makes the op).

Works: with ``async_op=True`` a method returns a ``StraitWork`` (a ``torch.distributed.Work``)
at once and the operation runs in strait's progress engine; its buffers (inputs and outputs) stay
referenced until it has finished, even when the Work is dropped. ``wait()`` raises RuntimeError
(StraitError) carrying strait's whole message; ``get_future()`` gives a torch Future of the output
tensors. torch's own API with ``async_op=False`` (it waits at once anyway) finishes the
operation before returning, raising its error directly: the collectives then call strait's
blocking form, which is cheaper for small tensors, and return a shared finished Work. Callers in
C++ (DDP's Reducer, ``_broadcast_coalesced``), which cannot see a Python Work, get a pending C++
Work, so DDP overlaps its bucket allreduces with backward: with the compiled extension
(python/ext/strait_torch.cpp) a C++ thread completes it; without it, a torch Future that a Python
thread fulfils (``STRAIT_TORCH_CPP_WORK``, see ``_work``). While a torch profiler records, each
operation is a span ``strait::<operation> bytes=<N>``.

Thread-safety: the operations of one group must be issued in the same order on every rank, so
issue them from one thread; waiting on Works from other threads is safe.
"""

import ctypes
import sys
import threading
import weakref
from ctypes import byref, c_int64, c_void_p
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import _capi as C
from . import _coalesced, _compat, _p2p, _premul, _sparse, _work
from ._work import DONE as _DONE, StraitWork

__all__ = ["ProcessGroupStrait", "StraitWork", "create_process_group"]

_NAME = "strait"

# torch dtype -> straitDataType_t, for reductions.
_REDUCE_DTYPES = {
    torch.float32: C.FLOAT32, torch.float64: C.FLOAT64, torch.float16: C.FLOAT16,
    torch.bfloat16: C.BFLOAT16, torch.int32: C.INT32, torch.int64: C.INT64,
    torch.int8: C.INT8, torch.uint8: C.UINT8,
}
_STRIDED = torch.strided
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# ReduceOp.RedOpType -> straitRedOp_t (BAND, BOR, BXOR: integer dtypes only, which the library
# checks); PREMUL_SUM is SUM over scaled inputs (_premul), in all_reduce and reduce_scatter_tensor.
_RT = dist.ReduceOp.RedOpType
_REDUCE_OPS = {_RT.SUM: C.SUM, _RT.PRODUCT: C.PROD, _RT.MIN: C.MIN, _RT.MAX: C.MAX,
               _RT.BAND: C.BAND, _RT.BOR: C.BOR, _RT.BXOR: C.BXOR}
if hasattr(_RT, "AVG"):
    _REDUCE_OPS[_RT.AVG] = C.AVG
_PREMUL_SUM = getattr(_RT, "PREMUL_SUM", None)
# The ReduceOp constants (dist.ReduceOp.SUM, ...) by identity, for torch's callers that pass
# one (see allreduce); _OP_CONSTANTS keeps them referenced, so their ids stay theirs.
_OP_CONSTANTS = tuple((getattr(dist.ReduceOp, n), code) for n, code in
                      (("SUM", C.SUM), ("PRODUCT", C.PROD), ("MIN", C.MIN), ("MAX", C.MAX),
                       ("AVG", C.AVG), ("BAND", C.BAND), ("BOR", C.BOR), ("BXOR", C.BXOR))
                      if hasattr(dist.ReduceOp, n))
_OPS_BY_ID = {id(obj): code for obj, code in _OP_CONSTANTS}
_REDUCE_OP_NAMES = ", ".join(str(k).split(".")[-1] for k in _REDUCE_OPS)

_THIS_FILE = __file__[:-1] if __file__.endswith(".pyc") else __file__
_THIS_DIR = _THIS_FILE.rsplit("/", 1)[0] + "/"  # the ops in the modules beside it (_p2p, ...)
_C10D_FILE = _compat.c10d_file

_ALLREDUCE_ASYNC = C.straitAllReduceAsync
_ALLREDUCE = C.straitAllReduce
# Each Async entry point's blocking form (the same arguments but the request), by the id of the
# Async one (ctypes functions are not hashable; both live as long as the module).
_BLOCKING = {id(getattr(C, name + "Async")): getattr(C, name) for name in (
    "straitAllReduce", "straitBroadcast", "straitReduce", "straitAllGather", "straitAllGatherV",
    "straitReduceScatter", "straitReduceScatterV", "straitGather", "straitScatter",
    "straitAllToAll", "straitAllToAllV", "straitBarrier", "straitSend", "straitRecv")}
_TEST = C.straitTest
_FREE = C.straitRequestFree
_PROFILING = _work.profiling


class _StoreCallbacks:
    """straitStore_t over a c10d Store (the one torch hands the creation function, already
    prefixed per group). Callbacks never raise into ctypes (that would read as success): every
    failure becomes a straitResult_t, and its text is kept in ``errors`` for the init message."""

    def __init__(self, store):
        self.store = store
        self.errors = []
        self._pending = {}  # a value too long for get's buffer, kept for strait's second call
        self._cbs = (C.STORE_SET(self._set), C.STORE_GET(self._get), C.STORE_ADD(self._add),
                     C.STORE_WAIT(self._wait))
        self.struct = C.Store.new(*self._cbs)

    def _fail(self, e, what):
        text = str(e)
        self.errors.append(f"c10d store {what}: {text}")
        low = text.lower()
        if "timeout" in low or "timed out" in low:
            return C.TIMEOUT
        if isinstance(e, ConnectionError) or "connect" in low or "broken pipe" in low \
                or "reset by peer" in low:
            return C.PEER_LOST
        return C.IO_ERROR

    @staticmethod
    def _key(key, length):
        return ctypes.string_at(key, length).decode("latin-1")

    @staticmethod
    def _delta(timeout_ms):
        return timedelta(milliseconds=max(int(timeout_ms), 1))  # 0 would mean "forever" in c10d

    def _set(self, _user, key, key_length, value, value_length):
        try:
            self.store.set(self._key(key, key_length), ctypes.string_at(value, value_length))
            return C.SUCCESS
        except BaseException as e:
            return self._fail(e, "set")

    def _get(self, _user, key, key_length, timeout_ms, value, capacity, value_length):
        try:
            k = self._key(key, key_length)
            v = self._pending.pop(k, None)
            if v is None:
                self.store.wait([k], self._delta(timeout_ms))
                v = self.store.get(k)
            value_length[0] = len(v)
            if len(v) <= capacity:
                if v:
                    ctypes.memmove(value, v, len(v))
            else:
                self._pending[k] = v
            return C.SUCCESS
        except BaseException as e:
            return self._fail(e, "get")

    def _add(self, _user, key, key_length, delta, result):
        try:
            result[0] = self.store.add(self._key(key, key_length), int(delta))
            return C.SUCCESS
        except BaseException as e:
            return self._fail(e, "add")

    def _wait(self, _user, keys, lengths, count, timeout_ms):
        try:
            names = [self._key(keys[i], lengths[i]) for i in range(count)]
            self.store.wait(names, self._delta(timeout_ms))
            return C.SUCCESS
        except BaseException as e:
            return self._fail(e, "wait")


def _destroy(comm, completer_box, store_callbacks):
    # weakref.finalize: runs once, at collection or exit. Pending operations fail with Aborted.
    del store_callbacks  # referenced here so the callbacks outlive the communicator
    for completer in completer_box:
        if completer is not None:
            completer.stop()
    try:
        C.straitCommDestroy(comm)
    except Exception:
        pass


# The compiled extension's ProcessGroupNative (a c10d ProcessGroup in C++) when it is built for
# this torch: C++ callers' allreduce then never enters Python (see python/ext/strait_torch.cpp).
_EXTENSION = _work.extension()[0]
_BASE = _EXTENSION.ProcessGroupNative if _EXTENSION is not None else dist.ProcessGroup


class ProcessGroupStrait(_BASE):
    """torch.distributed ProcessGroup over one strait communicator.

    Args:
        store: a c10d Store shared by the group's ranks (torch passes it, prefixed per group).
        rank, size: this process's rank in the group and the group's size.
        timeout: timedelta, the deadline of connecting and of every operation.

    Raises RuntimeError (StraitError) with strait's message when the communicator cannot be
    created (a rank missing past the timeout, the store failing).
    """

    def __init__(self, store, rank, size, timeout=timedelta(minutes=30)):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._lock = threading.Lock()
        self._orphans = []
        self._failed_buffers = []
        self._completer_box = [None, None]  # the Python completer, the compiled one
        self._store = _StoreCallbacks(store)
        config = C.Config.new()
        config.timeoutMs = min(max(int(timeout.total_seconds() * 1000), 1), 10**9)
        comm = c_void_p()
        rc = C.straitCommInitStore(byref(comm), size, rank, byref(self._store.struct),
                                   byref(config))
        if rc != C.SUCCESS:
            detail = C.last_error(None) or C.error_string(rc)
            extra = "; ".join(self._store.errors[-3:])
            raise C.StraitError(rc, f"strait: creating the communicator of rank {rank} of "
                                f"{size} failed: {detail}" + (f" ({extra})" if extra else ""))
        self._comm = comm.value
        # Whether the C++ side only sees C++ Works (torch < 2.1), and which it gets: see _submit.
        self._cpp_fallback = not _compat.python_work_seen_by_cpp
        mode = _work.cpp_work_mode()
        self._cpp_pending = mode != "finished"
        # The compiled completer (C++ Works for C++ callers), when the extension is built.
        ext = _work.extension()[0] if self._cpp_fallback and mode == "pending" else None
        self._native = ext.Completer() if ext is not None else None
        self._completer_box[1] = self._native
        if self._native is not None and _BASE is not dist.ProcessGroup:
            self._attach(self._comm, self._native)
        self._finalizer = weakref.finalize(self, _destroy, self._comm, self._completer_box,
                                           self._store)

    # ---- plumbing ----

    def getBackendName(self):
        return _NAME

    def _get_backend_name(self):
        return _NAME

    def shutdown(self):
        """Destroys the communicator now; pending operations fail with straitAborted."""
        if _BASE is not dist.ProcessGroup:
            self._detach()
        self._finalizer()

    def _completer(self):
        c = self._completer_box[0]
        if c is None:
            with self._lock:
                c = self._completer_box[0]
                if c is None:
                    c = self._completer_box[0] = _work.Completer()
        return c

    def _reap(self):
        # Dropped Works whose operations were still running: free those that have finished.
        alive = []
        for req, keep in self._orphans:
            if _TEST(req) == C.IN_PROGRESS:
                alive.append((req, keep))
            else:
                _FREE(req)
        self._orphans = alive

    def _fail_submit(self, rc, name):
        raise C.StraitError(rc, f"strait: {name} failed: "
                            f"{C.last_error(self._comm) or C.error_string(rc)}")

    def _submit(self, fn, args, keep, result, name, post=None):
        """Calls an Async entry point (args without the request) and wraps its request; for
        torch's API with async_op=False, the blocking form with the same args instead (see
        _torch_caller). C++ callers get _work.cpp_work's Work."""
        if self._orphans:
            self._reap()
        span = _work.span_begin(name, result) if _PROFILING() else None
        f = sys._getframe(2)  # 0: here, 1: the collective, 2: its caller
        if f.f_code.co_filename == _C10D_FILE and f.f_locals.get("async_op") is False:
            try:
                rc = _BLOCKING[id(fn)](*args)
            finally:
                if span is not None:
                    _work.span_end(span)
            if rc != C.SUCCESS:
                self._failed_buffers.append(keep)  # see StraitWork._complete
                self._fail_submit(rc, name)
            if post is not None:
                post()
            return _DONE
        req = c_void_p()
        rc = fn(*args, byref(req))
        if rc != C.SUCCESS:
            if span is not None:
                _work.span_end(span)
            self._fail_submit(rc, name)
        if (self._native is not None and post is None and span is None and keep is result
                and self._called_from_cpp()):
            try:
                return self._native.work(req.value, result, name)
            except TypeError:  # result is not a list of tensors: the request is still ours
                pass
        work = StraitWork(self, req.value, keep, result, post, name)
        if span is not None:
            _work.span_until_done(span, work)
        if self._cpp_fallback and self._called_from_cpp():
            # torch < 2.1: a C++ caller would block forever in the base Work::wait().
            return _work.cpp_work(work, self._cpp_pending)
        return work

    @staticmethod
    def _torch_caller():
        """The local variables of torch's Python API function that called the collective (e.g.
        all_reduce's tensor, op, group, async_op), or None when something else called it.

        With async_op=False torch waits on the Work at once, so the collectives with a blocking
        C form use it and return a finished Work: that skips handing the operation to strait's
        progress thread and back, which is most of a small operation's time."""
        f = sys._getframe(2)  # 0: here, 1: the collective, 2: its caller
        return f.f_locals if f.f_code.co_filename == _C10D_FILE else None

    @staticmethod
    def _called_from_cpp():
        # The first frame outside this file is the caller. torch's Python API
        # (distributed_c10d.py) calls us directly; anything else reaching us without a Python
        # frame of its own went through C++ (DDP, _broadcast_coalesced) or is user code calling
        # the group's methods directly, which then also gets a finished Work (correct, blocking).
        try:
            f = sys._getframe(2)
            while f is not None and f.f_code.co_filename.startswith(_THIS_DIR):
                f = f.f_back
        except ValueError:
            return True
        return f is None or f.f_code.co_filename != _C10D_FILE

    def _stream(self, t):
        return torch.cuda.current_stream(t.device).cuda_stream

    def _check(self, t, name, device=None):
        """Validates a tensor; returns its stream (None for host tensors). The common case (a
        contiguous host tensor) costs three attribute reads: this runs on every call."""
        try:
            contiguous = t.is_contiguous()
        except (AttributeError, RuntimeError, TypeError):  # not a tensor; sparse, mkldnn
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"strait: {name}: expected a torch.Tensor, got "
                                f"{type(t).__name__}") from None
            raise ValueError(f"strait: {name}: {t.layout} tensors are not supported; pass a "
                             "dense tensor (tensor.to_dense())") from None
        if t.layout is not _STRIDED:
            raise ValueError(f"strait: {name}: {t.layout} tensors are not supported; pass a "
                             "dense tensor (tensor.to_dense())")
        if not contiguous:
            raise ValueError(f"strait: {name}: the tensor of shape {tuple(t.shape)} and strides "
                             f"{t.stride()} is not contiguous; pass tensor.contiguous() (and copy "
                             "the result back if it is an output)")
        if device is not None and t.device != device:
            raise ValueError(f"strait: {name}: tensors on {device} and {t.device} in one call; "
                             "put every tensor of a call on one device")
        if t.is_cpu:
            return None
        if t.is_cuda:
            return self._stream(t)
        raise ValueError(f"strait: {name}: tensors on {t.device} are not supported; strait "
                         "takes host (cpu) and CUDA tensors")

    def _checks(self, tensors, name, device):
        for t in tensors:
            self._check(t, name, device)

    @staticmethod
    def _rdtype(t, name):
        dt = _REDUCE_DTYPES.get(t.dtype)
        if dt is None:
            raise TypeError(f"strait: {name}: dtype {t.dtype} cannot be reduced; strait reduces "
                            "float32, float64, float16, bfloat16, int32, int64, int8 and uint8 "
                            "(cast the tensor, e.g. bool to uint8, complex with "
                            "torch.view_as_real)")
        return dt

    @staticmethod
    def _mdtype(t):
        """(straitDataType_t, element-count factor) for data movement: any dtype, as bytes
        when strait has no type of its own for it."""
        dt = _REDUCE_DTYPES.get(t.dtype)
        if dt is not None:
            return dt, 1
        return C.UINT8, t.element_size()

    @staticmethod
    def _op(opts, t, name, premul=None):
        """The straitRedOp_t of opts' reduce op for tensor t. PREMUL_SUM (all_reduce and
        reduce_scatter_tensor, which pass ``premul``): calls premul(factor), which scales the
        operation's input, and returns SUM (see _premul)."""
        rt = _compat.red_op_type(opts.reduceOp) if opts is not None else None
        op = _REDUCE_OPS.get(rt) if opts is not None else C.SUM
        if op is None and rt == _PREMUL_SUM:
            if premul is None:
                raise ValueError(f"strait: {name}: PREMUL_SUM is supported by all_reduce and "
                                 "reduce_scatter_tensor; scale the tensor and use SUM")
            premul(_premul.factor(name, t))
            return C.SUM
        if op is None:
            raise ValueError(f"strait: {name}: reduce op {opts.reduceOp.op} is not supported; "
                             f"strait has {_REDUCE_OP_NAMES}")
        if op == C.AVG and t.dtype not in _FLOATS:
            raise ValueError(f"strait: {name}: AVG is defined for floating-point tensors only, "
                             f"not {t.dtype}; use SUM and divide")
        return op

    @staticmethod
    def _one(tensors, name):
        if len(tensors) != 1:
            raise ValueError(f"strait: {name}: takes one tensor per process, got {len(tensors)} "
                             "(one process per device)")
        return tensors[0]

    @staticmethod
    def _same(tensors, like, name):
        for t in tensors:
            if t.dtype != like.dtype:
                raise TypeError(f"strait: {name}: tensors of dtypes {like.dtype} and {t.dtype} "
                                "in one call; use one dtype")

    def _root(self, root, name):
        if not 0 <= root < self._size:
            raise ValueError(f"strait: {name}: root {root} is not a rank of this group of "
                             f"{self._size}")
        return root

    @staticmethod
    def _packed(tensors):
        """Whether the tensors lie back to back in memory, in order (then no staging copy)."""
        if not tensors:
            return False
        base = tensors[0].data_ptr()
        for t in tensors:
            if t.data_ptr() != base:
                return False
            base += t.numel() * t.element_size()
        return True

    def _per_rank(self, tensors, like, name, what):
        """Checks a list of one tensor per rank (`what`: "the output list", ...) against `like`."""
        if len(tensors) != self._size:
            raise ValueError(f"strait: {name}: {what} has {len(tensors)} tensors; it needs one "
                             f"per rank ({self._size})")
        self._checks(tensors, name, like.device)
        self._same(tensors, like, name)

    def _joined(self, tensors):
        """The tensors as one flat buffer: themselves when packed, else a copy."""
        return tensors[0] if self._packed(tensors) else torch.cat([t.reshape(-1) for t in tensors])

    def _split(self, outs, like):
        """A flat buffer for the tensors `outs` and the function that copies it into them
        afterwards: (outs[0], None) when they are packed, else a staging buffer."""
        if self._packed(outs):
            return outs[0], None
        flat = torch.empty(sum(o.numel() for o in outs), dtype=like.dtype, device=like.device)

        def post():
            offset = 0
            for o in outs:
                o.copy_(flat[offset:offset + o.numel()].view_as(o))
                offset += o.numel()

        return flat, post

    @staticmethod
    def _counts(values):
        return (c_int64 * len(values))(*values)

    # ---- collectives (the signatures distributed_c10d.py calls) ----

    def allreduce(self, tensors, opts=None):
        t = self._one(tensors, "allreduce")
        if t.layout is not _STRIDED:
            return _sparse.allreduce(self, tensors, opts)
        stream = self._check(t, "allreduce")
        dt = _REDUCE_DTYPES.get(t.dtype) or self._rdtype(t, "allreduce")
        p = t.data_ptr()
        caller = self._torch_caller()
        if caller is not None:
            # torch's all_reduce: its `op` argument is one of the ReduceOp constants (no need to
            # read it back out of opts, which costs ~2 us of pybind calls), and with
            # async_op=False it waits at once, so the blocking C call does the operation.
            op = _OPS_BY_ID.get(id(caller.get("op")))
            if op is None or (op == C.AVG and t.dtype not in _FLOATS):
                op = self._op(opts, t, "allreduce", premul=t.mul_)
            if caller.get("async_op") is False:
                if _PROFILING():
                    span = _work.span_begin("allreduce", t)
                    rc = _ALLREDUCE(p, p, t.numel(), dt, op, self._comm, stream)
                    _work.span_end(span)
                else:
                    rc = _ALLREDUCE(p, p, t.numel(), dt, op, self._comm, stream)
                if rc != C.SUCCESS:
                    self._fail_submit(rc, "allreduce")
                return _DONE
        else:
            op = self._op(opts, t, "allreduce", premul=t.mul_)
        return self._submit(_ALLREDUCE_ASYNC, (p, p, t.numel(), dt, op, self._comm, stream),
                            tensors, tensors, "allreduce")

    def allreduce_coalesced(self, tensors, opts=None):
        if not tensors:
            raise ValueError("strait: allreduce_coalesced: no tensors")
        first = tensors[0]
        stream = self._check(first, "allreduce_coalesced")
        self._checks(tensors, "allreduce_coalesced", first.device)
        self._same(tensors, first, "allreduce_coalesced")
        op = self._op(opts, first, "allreduce_coalesced")
        dt = self._rdtype(first, "allreduce_coalesced")
        flat = torch.cat([t.reshape(-1) for t in tensors])

        def post():
            offset = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[offset:offset + n].view_as(t))
                offset += n

        p = flat.data_ptr()
        return self._submit(C.straitAllReduceAsync, (p, p, flat.numel(), dt, op, self._comm,
                                                     stream),
                            (tensors, flat), tensors, "allreduce_coalesced", post)

    def broadcast(self, tensors, opts=None):
        t = self._one(tensors, "broadcast")
        stream = self._check(t, "broadcast")
        root = self._root(opts.rootRank if opts is not None else 0, "broadcast")
        if opts is not None and opts.rootTensor != 0:
            raise ValueError("strait: broadcast: rootTensor must be 0 (one tensor per process)")
        dt, k = self._mdtype(t)
        return self._submit(C.straitBroadcastAsync,
                            (t.data_ptr(), t.numel() * k, dt, root, self._comm, stream),
                            tensors, tensors, "broadcast")

    def reduce(self, tensors, opts=None):
        t = self._one(tensors, "reduce")
        stream = self._check(t, "reduce")
        root = self._root(opts.rootRank if opts is not None else 0, "reduce")
        op = self._op(opts, t, "reduce")
        dt = self._rdtype(t, "reduce")
        p = t.data_ptr()
        return self._submit(C.straitReduceAsync,
                            (p, p if self._rank == root else None, t.numel(), dt, op, root,
                             self._comm, stream),
                            tensors, tensors, "reduce")

    def allgather(self, output_tensors, input_tensors, opts=None):
        name = "allgather"
        inp = self._one(input_tensors, name)
        outs = self._one(output_tensors, name)
        stream = self._check(inp, name)
        self._per_rank(outs, inp, name, "the output list")
        dt, k = self._mdtype(inp)
        n = inp.numel()
        counts = [o.numel() for o in outs]
        if counts[self._rank] != n:
            raise ValueError(f"strait: {name}: output {self._rank} has {counts[self._rank]} "
                             f"elements, the input {n}; they must match")
        flat, post = self._split(outs, inp)
        keep = (output_tensors, input_tensors, flat)
        if any(c != n for c in counts):
            rc = self._counts([c * k for c in counts])
            return self._submit(C.straitAllGatherVAsync,
                                (inp.data_ptr(), flat.data_ptr(), rc, dt, self._comm),
                                (keep, rc), output_tensors, name, post)
        return self._submit(C.straitAllGatherAsync,
                            (inp.data_ptr(), flat.data_ptr(), n * k, dt, self._comm, stream),
                            keep, output_tensors, name, post)

    def _allgather_base(self, output, input, opts=None):
        name = "all_gather_into_tensor"
        stream = self._check(input, name)
        self._check(output, name, input.device)
        self._same([output], input, name)
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"strait: {name}: the output has {output.numel()} elements; it "
                             f"needs the input's {input.numel()} times {self._size} ranks")
        dt, k = self._mdtype(input)
        return self._submit(C.straitAllGatherAsync,
                            (input.data_ptr(), output.data_ptr(), input.numel() * k, dt,
                             self._comm, stream),
                            (output, input), [output], name)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return _coalesced.allgather_into_tensor_coalesced(self, outputs, inputs, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return _coalesced.reduce_scatter_tensor_coalesced(self, outputs, inputs, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        name = "reduce_scatter"
        out = self._one(output_tensors, name)
        ins = self._one(input_tensors, name)
        stream = self._check(out, name)
        self._per_rank(ins, out, name, "the input list")
        op = self._op(opts, out, name)
        dt = self._rdtype(out, name)
        counts = [i.numel() for i in ins]
        if counts[self._rank] != out.numel():
            raise ValueError(f"strait: {name}: input {self._rank} has {counts[self._rank]} "
                             f"elements, the output {out.numel()}; they must match")
        flat = self._joined(ins)
        keep = (output_tensors, input_tensors, flat)
        if any(c != out.numel() for c in counts):
            rc = self._counts(counts)
            return self._submit(C.straitReduceScatterVAsync,
                                (flat.data_ptr(), out.data_ptr(), rc, dt, op, self._comm),
                                (keep, rc), output_tensors, name)
        return self._submit(C.straitReduceScatterAsync,
                            (flat.data_ptr(), out.data_ptr(), out.numel(), dt, op, self._comm,
                             stream),
                            keep, output_tensors, name)

    def _reduce_scatter_base(self, output, input, opts=None):
        name = "reduce_scatter_tensor"
        stream = self._check(output, name)
        self._check(input, name, output.device)
        self._same([input], output, name)
        scaled = []  # PREMUL_SUM: a scaled copy of the input (the caller's stays as it is)
        op = self._op(opts, output, name, premul=lambda f: scaled.append(input * f))
        input = scaled[0] if scaled else input
        dt = self._rdtype(output, name)
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"strait: {name}: the input has {input.numel()} elements; it needs "
                             f"the output's {output.numel()} times {self._size} ranks")
        return self._submit(C.straitReduceScatterAsync,
                            (input.data_ptr(), output.data_ptr(), output.numel(), dt, op,
                             self._comm, stream),
                            (output, input), [output], name)

    def gather(self, output_tensors, input_tensors, opts=None):
        name = "gather"
        inp = self._one(input_tensors, name)
        stream = self._check(inp, name)
        root = self._root(opts.rootRank if opts is not None else 0, name)
        dt, k = self._mdtype(inp)
        n = inp.numel()
        flat, post, keep = None, None, (output_tensors, input_tensors)
        if self._rank == root:
            outs = self._one(output_tensors, name)
            self._per_rank(outs, inp, name, "the root's output list")
            for o in outs:
                if o.numel() != n:
                    raise ValueError(f"strait: {name}: an output has {o.numel()} elements, the "
                                     f"input {n}; every tensor must have the same size")
            flat, post = self._split(outs, inp)
            keep = (output_tensors, input_tensors, flat)
        elif output_tensors and any(len(x) for x in output_tensors):
            raise ValueError(f"strait: {name}: only the root (rank {root}) passes an output "
                             "list")
        return self._submit(C.straitGatherAsync,
                            (inp.data_ptr(), flat.data_ptr() if flat is not None else None,
                             n * k, dt, root, self._comm, stream),
                            keep, output_tensors, name, post)

    def scatter(self, output_tensors, input_tensors, opts=None):
        name = "scatter"
        out = self._one(output_tensors, name)
        stream = self._check(out, name)
        root = self._root(opts.rootRank if opts is not None else 0, name)
        dt, k = self._mdtype(out)
        n = out.numel()
        flat = None
        if self._rank == root:
            ins = self._one(input_tensors, name)
            self._per_rank(ins, out, name, "the root's input list")
            for i in ins:
                if i.numel() != n:
                    raise ValueError(f"strait: {name}: an input has {i.numel()} elements, the "
                                     f"output {n}; every tensor must have the same size")
            flat = self._joined(ins)
        elif input_tensors and any(len(x) for x in input_tensors):
            raise ValueError(f"strait: {name}: only the root (rank {root}) passes an input list")
        return self._submit(C.straitScatterAsync,
                            (flat.data_ptr() if flat is not None else None, out.data_ptr(),
                             n * k, dt, root, self._comm, stream),
                            (output_tensors, input_tensors, flat), output_tensors, name)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        name = "all_to_all"
        if len(output_tensors) != self._size or len(input_tensors) != self._size:
            raise ValueError(f"strait: {name}: {len(input_tensors)} inputs and "
                             f"{len(output_tensors)} outputs; it needs one of each per rank "
                             f"({self._size})")
        first = input_tensors[0]
        stream = self._check(first, name)
        self._checks(input_tensors, name, first.device)
        self._checks(output_tensors, name, first.device)
        self._same(input_tensors, first, name)
        self._same(output_tensors, first, name)
        dt, k = self._mdtype(first)
        send = [t.numel() * k for t in input_tensors]
        recv = [t.numel() * k for t in output_tensors]
        sflat = self._joined(input_tensors)
        rflat, post = self._split(output_tensors, first)

        keep = (output_tensors, input_tensors, sflat, rflat)
        if len(set(send)) == 1 and len(set(recv)) == 1 and send[0] == recv[0]:
            return self._submit(C.straitAllToAllAsync,
                                (sflat.data_ptr(), rflat.data_ptr(), send[0], dt, self._comm,
                                 stream),
                                keep, output_tensors, name, post)
        sc, rc = self._counts(send), self._counts(recv)
        return self._submit(C.straitAllToAllVAsync,
                            (sflat.data_ptr(), sc, rflat.data_ptr(), rc, dt, self._comm),
                            (keep, sc, rc), output_tensors, name, post)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        name = "all_to_all_single"
        stream = self._check(input, name)
        self._check(output, name, input.device)
        self._same([output], input, name)
        dt, k = self._mdtype(input)
        P = self._size

        def counts(t, splits, what):
            if not splits:
                if t.numel() % P:
                    raise ValueError(f"strait: {name}: the {what} has {t.numel()} elements, "
                                     f"not a multiple of the {P} ranks; pass {what}_split_sizes")
                return [t.numel() // P * k] * P
            if len(splits) != P:
                raise ValueError(f"strait: {name}: {what}_split_sizes has {len(splits)} "
                                 f"entries; it needs one per rank ({P})")
            rows = t.size(0) if t.dim() else 1
            if sum(splits) != rows:
                raise ValueError(f"strait: {name}: {what}_split_sizes sum to {sum(splits)}, but "
                                 f"the {what} has {rows} rows (its first dimension)")
            row = t.numel() // rows if rows else 0
            return [s * row * k for s in splits]

        send = counts(input, input_split_sizes, "input")
        recv = counts(output, output_split_sizes, "output")
        keep = (output, input)
        if not input_split_sizes and not output_split_sizes:
            return self._submit(C.straitAllToAllAsync,
                                (input.data_ptr(), output.data_ptr(), send[0], dt, self._comm,
                                 stream),
                                keep, [output], name)
        sc, rc = self._counts(send), self._counts(recv)
        return self._submit(C.straitAllToAllVAsync,
                            (input.data_ptr(), sc, output.data_ptr(), rc, dt, self._comm),
                            (keep, sc, rc), [output], name)

    def barrier(self, opts=None):
        return self._submit(C.straitBarrierAsync, (self._comm,), None, [], "barrier")

    def send(self, tensors, dstRank, tag=0):
        t = self._one(tensors, "send")
        stream = self._check(t, "send")
        dt, k = self._mdtype(t)
        return self._submit(C.straitSendAsync,
                            (t.data_ptr(), t.numel() * k, dt, dstRank, tag, self._comm, stream),
                            tensors, tensors, "send")

    def recv(self, tensors, srcRank, tag=0):
        t = self._one(tensors, "recv")
        stream = self._check(t, "recv")
        dt, k = self._mdtype(t)
        return self._submit(C.straitRecvAsync,
                            (t.data_ptr(), t.numel() * k, dt, srcRank, tag, self._comm, stream),
                            tensors, tensors, "recv")

    def recv_anysource(self, tensors, tag=0):
        return _p2p.recv_anysource(self, tensors, tag)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return _coalesced.allgather_coalesced(self, output_lists, input_list, opts)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return _p2p.monitored_barrier(self, timeout, wait_all_ranks)

    def _start_coalescing(self):
        _p2p.start_coalescing(self)

    def _end_coalescing(self, reqs):
        _p2p.end_coalescing(self, reqs)

    def _get_sequence_number_for_group(self):
        return _p2p.sequence_number(self)


def create_process_group(store, rank, size, timeout):
    """The creation function registered with torch: ``ProcessGroupStrait(store, rank, size,
    timeout)``."""
    return ProcessGroupStrait(store, rank, size, timeout)
