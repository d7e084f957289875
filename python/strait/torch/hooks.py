"""DDP communication hooks that allreduce gradient buckets with strait's compressed collectives.

    from strait.torch import hooks
    state = hooks.CompressionState(codec="int8", start_iter=10)
    model = torch.nn.parallel.DistributedDataParallel(model)   # process group: gloo or strait
    model.register_comm_hook(state, hooks.compressed_allreduce)

Every bucket is one strait call, `straitAllReduceCompressedAsync` with op Avg: the gradients of
all ranks averaged, lossy but bit-identical on every rank (so replicas never drift apart). The
codec is any strait spec ("bf16", "fp16", "int8", "int4:block=32", "onebit",
"topk:fraction=0.01", "powersgd:rank=4"); error feedback is keyed by the bucket's index; for
PowerSGD the bucket's >= 2-D parameters are passed as its matrices (1-D ones, biases and
layernorm parameters, go uncompressed), so a bucket costs the one round of low-rank factor
exchanges strait's PowerSGD makes.

The process group may be Gloo: the state then opens its own strait communicator over the group's
store (torch's default store, under a prefix of its own), so a job keeps Gloo for everything else
and takes only the codecs. With strait's own backend the same holds (a second communicator over the
same store; the hook's traffic then never interleaves with the backend's). On torch 1.13 the
backend hands DDP's C++ Reducer finished operations (README, PyTorch), so without a hook DDP's
allreduce does not overlap the backward pass; this hook's futures do, even with codec "none".

The library is the libstrait.so strait._capi finds ($STRAIT_LIBRARY, the install prefix, the
build tree, the loader's path), through that one binding; the hook's communicator bootstraps over
the c10d store with the backend's store callbacks.
"""

import ctypes
import datetime
import hashlib
import itertools
import os
import queue
import threading
import warnings
import weakref
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist

__all__ = [
    "CompressionState",
    "StraitError",
    "compressed_allreduce",
    "expected_allreduce_bytes",
    "load_library",
]

# ---- the C API: strait._capi's binding, the backend's store callbacks ------------------------

from strait import _capi as C  # noqa: E402 (after torch: the backend's module needs it)
from strait._capi import StraitError  # noqa: E402
from strait.torch.backend import _StoreCallbacks  # noqa: E402


def load_library() -> ctypes.CDLL:
    """The libstrait.so strait._capi loaded ($STRAIT_LIBRARY, the install prefix, the build
    tree, the loader's path), with its functions' argument types set."""
    return C.lib


def _check(rc: int, what: str, comm: Optional[int] = None) -> None:
    C.check(rc, comm, what)


_instances = itertools.count()


def _group_store(group) -> "dist.Store":
    """The store the group was bootstrapped over (torch's default store), or a client of the
    job's MASTER_ADDR:MASTER_PORT store when torch has none."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 (private API; fall back to the environment)
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not addr or not port:
            raise RuntimeError(
                "strait.torch.hooks: no torch.distributed default store and no "
                "MASTER_ADDR/MASTER_PORT in the environment: call "
                "torch.distributed.init_process_group first") from None
        return dist.TCPStore(addr, int(port), is_master=False,
                             timeout=datetime.timedelta(seconds=300))


# ---- the pending-request waiter ----------------------------------------------------------------


class _Waiter:
    """One thread that waits on strait's requests in submission order (strait finishes a
    communicator's operations in that order) and completes each bucket's future, so DDP's
    backward thread never blocks on the network."""

    def __init__(self):
        self._queue: "queue.Queue[Optional[tuple]]" = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="strait-hook-waiter", daemon=True)
        self._thread.start()

    def submit(self, request: int, fut: torch.futures.Future, result: torch.Tensor,
               finish, keep: tuple) -> None:
        self._queue.put((request, fut, result, finish, keep))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, fut, result, finish, _keep = item
            # The wait is bounded by the operation's own deadline (the communicator's timeout).
            rc = C.straitWait(request, C.WAIT_DEADLINE)
            try:
                if rc != C.SUCCESS:
                    msg = (C.straitRequestGetError(request) or b"").decode(errors="replace")
                    name = C.error_string(rc)
                    fut.set_exception(StraitError(
                        rc, f"strait.torch.hooks: bucket allreduce failed: {msg or name}"))
                    continue
                if finish is not None:
                    finish()
                fut.set_result(result)
            except BaseException as e:  # noqa: BLE001 (the future carries it to DDP)
                fut.set_exception(e)
            finally:
                C.straitRequestFree(request)


# ---- the state and the hook --------------------------------------------------------------------


class CompressionState:
    """What `compressed_allreduce` needs across iterations: the codec, the warm-up, the strait
    communicator and the iteration count.

    Args:
        codec: a strait codec spec ("int8", "int4:block=32", "bf16", "fp16", "onebit",
            "topk:fraction=0.01", "powersgd:rank=4", "auto"); "none" runs the plain (lossless)
            averaging allreduce throughout.
        start_iter: iterations of plain averaging allreduce before compression starts (as
            PowerSGD's start_powerSGD_iter: the first steps move the weights most, and DDP
            rebuilds its buckets after the first).
        process_group: DDP's group (None: the default group); gives rank, size and the store.
        error_feedback: keep each bucket's compression error and add it to its next input
            (keyed by bucket index; strait resets a key whose size changes).
        timeout_s: deadline of every strait operation (connecting included); a rank that does
            not arrive fails the others' steps with StraitError(straitTimeout) instead of a hang.
        key_prefix: distinguishes the error-feedback keys and the store keys of several states.

    Collective: every rank of the group constructs its states in the same order (the
    constructor connects a communicator over the group's store).

    Raises StraitError when the communicator cannot be created (message from strait), OSError
    when libstrait.so cannot be loaded, ValueError for an empty codec.
    """

    def __init__(self, codec: str = "int8", start_iter: int = 10, process_group=None,
                 error_feedback: bool = True, timeout_s: float = 300.0,
                 key_prefix: Optional[str] = None):
        if not codec:
            raise ValueError("CompressionState: codec is empty; pass a strait codec spec such as "
                             "'int8' or 'powersgd:rank=4', or 'none'")
        if start_iter < 0:
            raise ValueError(f"CompressionState: start_iter {start_iter} is negative")
        self.codec = codec
        self.start_iter = int(start_iter)
        self.process_group = process_group
        self.error_feedback = bool(error_feedback)
        self.iter = 0
        self._warned_convert = False
        self._powersgd = codec.split(":", 1)[0] == "powersgd"
        self._plain = codec == "none"
        group = process_group if process_group is not None else dist.group.WORLD
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        instance = next(_instances)
        self.key_prefix = key_prefix if key_prefix is not None else f"ddp{instance}"
        # A prefix per state and per group (its global ranks) keeps communicators apart in the
        # one default store.
        ranks = dist.distributed_c10d._pg_group_ranks.get(group) if group is not None else None
        tag = hashlib.sha1(repr(sorted(ranks) if ranks else "world").encode()).hexdigest()[:8]
        self._bridge = _StoreCallbacks(
            dist.PrefixStore(f"strait_hooks/{self.key_prefix}/{tag}/", _group_store(group)))
        config = C.Config.new()
        config.timeoutMs = max(1, int(timeout_s * 1000))
        comm = ctypes.c_void_p()
        rc = C.straitCommInitStore(ctypes.byref(comm), self.world_size, self.rank,
                                   ctypes.byref(self._bridge.struct), ctypes.byref(config))
        if rc != C.SUCCESS:
            detail = C.last_error(None)
            extra = f" (store: {self._bridge.errors[-1]})" if self._bridge.errors else ""
            raise StraitError(rc, f"CompressionState: connecting rank {self.rank} of "
                                  f"{self.world_size} over the process group's store failed: "
                                  f"{detail}{extra}")
        self._comm = comm.value
        self._waiter = _Waiter()
        self._layouts: Dict[int, Tuple[Tuple[int, int], Any]] = {}
        self._finalizer = weakref.finalize(self, CompressionState._release, self._waiter,
                                           self._comm)

    @staticmethod
    def _release(waiter: _Waiter, comm: int) -> None:
        waiter.close()
        C.straitCommDestroy(comm)

    def close(self) -> None:
        """Finishes pending buckets and frees the communicator (also done at exit)."""
        self._finalizer()

    def stats(self) -> Dict[str, int]:
        """Payload bytes this rank's hook communicator has sent, by operation (strait's
        straitCommGetStats): {"allreduceBytes": ..., ...}."""
        s = C.Stats.new()
        _check(C.straitCommGetStats(self._comm, ctypes.byref(s)), "straitCommGetStats",
               self._comm)
        return {f: int(getattr(s, f)) for f in C.STATS_FIELDS}

    # PowerSGD: the bucket's >= 2-D gradients as rows x cols matrices (conv kernels flattened to
    # [out, in * kh * kw], as torch's PowerSGD hook does), cached per bucket index and layout.
    def _matrices(self, bucket, buffer: torch.Tensor):
        grads = bucket.gradients()
        layout = tuple((tuple(g.shape), g.storage_offset()) for g in grads)
        cached = self._layouts.get(bucket.index())
        if cached is not None and cached[0] == layout:
            return cached[1]
        shapes = []
        running = 0
        for g in grads:
            # The views DDP hands out point into the bucket buffer; else they are packed in order.
            delta = g.data_ptr() - buffer.data_ptr()
            inside = delta % g.element_size() == 0 and \
                0 <= delta // g.element_size() <= buffer.numel() - g.numel()
            offset = delta // g.element_size() if inside else running
            running = offset + g.numel()
            if g.dim() >= 2 and g.numel() > 0:
                shapes.append(C.MatrixShape(offset, g.shape[0], g.numel() // g.shape[0]))
        array = (C.MatrixShape * len(shapes))(*shapes) if shapes else None
        self._layouts[bucket.index()] = (layout, (array, len(shapes)))
        return array, len(shapes)


# Real (not string) annotations: DDP's register_comm_hook checks them against these types.
def compressed_allreduce(state: CompressionState,
                         bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: averages the bucket's gradients over the group with strait, compressed by
    state.codec after state.start_iter iterations (plain averaging allreduce before).

    bucket.buffer(): the flat gradients, any floating dtype and device. strait's compressed
    allreduce takes host float32, so other dtypes (fp16, bf16, fp64) and device buffers are
    staged through a float32 host copy (a warning says so once); integer buffers raise TypeError.
    Returns a Future completed (by the state's waiter thread) with the averaged buffer, of the
    bucket's dtype and device; a failed allreduce completes it with StraitError, which DDP
    raises from backward(). A NaN or Inf gradient fails the step on its rank at once
    (straitInvalidArgument) and on the others at the timeout.
    """
    buffer = bucket.buffer()
    if not buffer.is_floating_point():
        raise TypeError(f"compressed_allreduce: bucket {bucket.index()} holds {buffer.dtype}; "
                        "only floating-point gradients can be averaged")
    staged = buffer.dtype != torch.float32 or buffer.device.type != "cpu" or \
        not buffer.is_contiguous()
    if staged and not state._warned_convert:
        state._warned_convert = True
        warnings.warn(f"compressed_allreduce: bucket of {buffer.dtype} on {buffer.device} is "
                      "staged through a float32 host copy (strait compresses host float32)")
    work = buffer.detach().to("cpu", torch.float32).contiguous() if staged else buffer
    finish = (lambda: buffer.copy_(work)) if staged else None

    count = work.numel()
    ptr = work.data_ptr()
    request = ctypes.c_void_p()
    keep: tuple = (work,)
    compressed = not state._plain and state.iter >= state.start_iter
    if compressed:
        key = f"{state.key_prefix}/bucket{bucket.index()}".encode() if state.error_feedback \
            else None
        matrices, n = (state._matrices(bucket, buffer) if state._powersgd else (None, 0))
        comp = C.Compression.new(state.codec.encode(), key, matrices, n)
        keep = (work, matrices, comp, key)  # alive until the request is done, copied or not
        rc = C.straitAllReduceCompressedAsync(ptr, ptr, count, C.FLOAT32, C.AVG,
                                              ctypes.byref(comp), state._comm,
                                              ctypes.byref(request))
        what = f"straitAllReduceCompressedAsync({state.codec}, bucket {bucket.index()})"
    else:
        rc = C.straitAllReduceAsync(ptr, ptr, count, C.FLOAT32, C.AVG, state._comm, None,
                                    ctypes.byref(request))
        what = f"straitAllReduceAsync(bucket {bucket.index()})"
    if bucket.is_last():
        state.iter += 1
    if rc != C.SUCCESS:
        # Refused before anything was sent: raise in DDP's thread (backward() fails here).
        _check(rc, what, state._comm)
    fut: torch.futures.Future = torch.futures.Future()
    state._waiter.submit(request.value, fut, buffer, finish, keep)
    return fut


def expected_allreduce_bytes(codec: str, count: int, world_size: int, rank: int) -> int:
    """Bytes `rank` sends in a compressed ring allreduce of `count` float32 elements on one site
    with a blockwise absmax codec ("int8[:block=B]" or "int4[:block=B]"). An independent model
    of strait's format (kernels/quantize.cpp, comm/algorithms/compressed_ring_allreduce.cpp), for
    tests: the buffer is cut into P near-equal chunks (the first count % P one element longer);
    in reduce-scatter step k rank r sends chunk r - k, in allgather step k chunk r + 1 - k
    (k = 0 .. P-2, mod P); each chunk goes as pipeline segments of about 2^18 elements (a multiple
    of the block), each segment encoded as one fp32 scale per started block plus ceil(n * bits / 8)
    code bytes."""
    name, _, args = codec.partition(":")
    opts = dict(a.split("=", 1) for a in args.split(",") if a)
    block = int(opts.get("block", 256))
    bits = {"int8": 8, "int4": 4}[name]

    def encoded(n: int) -> int:
        return 4 * (-(-n // block)) + (n * bits + 7) // 8

    p = world_size
    parts = [count // p + (1 if i < count % p else 0) for i in range(p)]
    largest = parts[0]
    seg = max(largest, 1)
    if block and largest > (1 << 18):
        wanted = -(-largest // (1 << 18))
        per = -(-largest // wanted)
        seg = -(-per // block) * block
    segments = -(-max(largest, 1) // seg)

    def chunk_bytes(c: int) -> int:
        n = parts[c % p]
        return sum(encoded(max(0, min(n, s * seg + seg) - min(n, s * seg)))
                   for s in range(segments))

    return sum(chunk_bytes(rank - k) + chunk_bytes(rank + 1 - k) for k in range(p - 1))
