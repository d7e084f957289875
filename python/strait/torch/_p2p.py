"""ProcessGroupStrait's monitored_barrier and the coalescing hooks of batch_isend_irecv.

monitored_barrier(timeout, wait_all_ranks): Gloo's semantics over the c10d store the group was
created with (not over strait's communicator, so a failure leaves the communicator usable):
every rank but 0 announces its arrival under a key of this call and waits for rank 0's answer;
rank 0 waits for each rank in turn within ``timeout`` and raises RuntimeError naming the first
rank that did not arrive ("Rank 2 failed to pass monitoredBarrier in 100 ms"), or with
``wait_all_ranks`` every one ("Ranks 1, 2 failed to pass monitoredBarrier ..."). Rank 0 then
tells the others, which raise "Rank r successfully reached monitoredBarrier, but received errors
while waiting for send/recv from rank 0: ...". Every rank of the group must call it the same
number of times (the keys carry a count of calls).

recv_anysource(tensors, tag): a receive from whichever rank sends first with ``tag``
(strait's straitRecvAnyAsync); the Work's ``source_rank()`` names the sender once it has
finished. Host tensors only (NCCL has no such receive).

_get_sequence_number_for_group: strait's own sequence number of the group's communicator (the
number its next collective takes; equal on every rank that issued the same collectives).

_start_coalescing / _end_coalescing(reqs): torch's batch_isend_irecv wraps its isend/irecv calls
in them. strait's sends and receives are asynchronous operations of its progress engine that
never block one another, so the batch is submitted back to back as one group; the hooks check
that every request of the batch is this group's.
"""

import ctypes
import time
from datetime import timedelta

from .. import _capi as C

_PREFIX = "strait/monitored_barrier/"


def _seconds(timeout, pg):
    if timeout is None:
        return pg._timeout_s if hasattr(pg, "_timeout_s") else 1800.0
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _wait(store, key, seconds):
    """True when key appeared within `seconds` (a c10d wait of 0 would mean forever)."""
    try:
        store.wait([key], timedelta(seconds=max(seconds, 0.001)))
        return True
    except RuntimeError as e:
        if "timeout" in str(e).lower() or "timed out" in str(e).lower():
            return False
        raise


def monitored_barrier(pg, timeout=None, wait_all_ranks=False):
    store = pg._store.store
    count = getattr(pg, "_monitored_calls", 0)
    pg._monitored_calls = count + 1
    key = f"{_PREFIX}{count}/"
    seconds = _seconds(timeout, pg)
    ms = int(seconds * 1000)
    rank, size = pg._rank, pg._size
    if rank != 0:
        store.set(f"{key}arrived/{rank}", b"1")
        # Rank 0 answers within its timeout; wait longer so its answer, not a race, decides.
        if not _wait(store, f"{key}answer", 2 * seconds + 5):
            answer = f"no answer from rank 0 within {2 * seconds + 5:.1f} s"
        else:
            answer = store.get(f"{key}answer").decode("utf-8", "replace")
        if answer != "ok":
            raise RuntimeError(f"Rank {rank} successfully reached monitoredBarrier, but received "
                               f"errors while waiting for send/recv from rank 0: {answer}")
        return None
    start = time.monotonic()
    missing = []
    for r in range(1, size):
        remaining = seconds - (time.monotonic() - start)
        arrived_key = f"{key}arrived/{r}"
        if remaining <= 0 and not missing and not _wait(store, arrived_key, 0):
            text = (f"[Rank 0]: Rank 0 timed out in monitoredBarrier after "
                    f"{int((time.monotonic() - start) * 1000)} ms (timeout {ms} ms)")
            store.set(f"{key}answer", text.encode())
            raise RuntimeError(text)
        if not _wait(store, arrived_key, remaining):
            missing.append(r)
            if not wait_all_ranks:
                break
    if missing:
        who = (f"Rank {missing[0]}" if len(missing) == 1 and not wait_all_ranks else
               "Ranks " + ", ".join(str(r) for r in missing))
        text = f"[Rank 0]: {who} failed to pass monitoredBarrier in {ms} ms"
        store.set(f"{key}answer", text.encode())
        raise RuntimeError(text)
    store.set(f"{key}answer", b"ok")
    return None


def start_coalescing(pg):
    if getattr(pg, "_coalescing", False):
        raise RuntimeError("strait: _start_coalescing: a batch is already open on this group "
                           "(batch_isend_irecv calls do not nest)")
    pg._coalescing = True


def end_coalescing(pg, reqs):
    if not getattr(pg, "_coalescing", False):
        raise RuntimeError("strait: _end_coalescing without _start_coalescing")
    pg._coalescing = False
    for w in reqs:
        owner = getattr(w, "_pg", pg)
        if owner is not None and owner is not pg:
            raise RuntimeError("strait: batch_isend_irecv: every operation of a batch must be "
                               "on the one group")


def recv_anysource(pg, tensors, tag=0):
    name = "recv (any source)"
    t = pg._one(tensors, name)
    if pg._check(t, name) is not None:
        raise ValueError(f"strait: {name}: host (cpu) tensors only; NCCL cannot receive from any "
                         "source: pass src=")
    dt, k = pg._mdtype(t)
    return pg._submit(C.straitRecvAnyAsync, (t.data_ptr(), t.numel() * k, dt, tag, pg._comm, None),
                      tensors, tensors, name)


def source_rank(work):
    req = getattr(work, "_req", None)
    if not req:
        raise RuntimeError("strait: source_rank(): this Work is not a receive from any source "
                           "(recv/irecv without src)")
    src = ctypes.c_int(-1)
    rc = C.straitRequestGetSource(req, ctypes.byref(src))
    if rc == C.IN_PROGRESS:
        raise RuntimeError("strait: source_rank(): the receive has not finished; wait() first")
    if rc != C.SUCCESS:
        raise C.StraitError(rc, f"strait: source_rank(): {C.last_error(None) or C.error_string(rc)}")
    return src.value


def sequence_number(pg):
    seq = ctypes.c_uint64()
    rc = C.straitCommGetSequenceNumber(pg._comm, ctypes.byref(seq))
    if rc != C.SUCCESS:
        pg._fail_submit(rc, "_get_sequence_number_for_group")
    return seq.value
