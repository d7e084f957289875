"""ctypes binding of libstrait.so's C API (capi/strait.h, installed as <strait/strait.h>).

Every function is bound once, with argtypes and restype set, as a module attribute of the same
name (``straitAllReduceAsync``, ...). Handles (straitComm_t, straitRequest_t, streams) and buffer
pointers are plain ints (``c_void_p``); counts are int64 elements. ctypes releases the GIL for
the duration of each call, so a blocking collective does not stall other Python threads.

The library is found, in this order, at:
  1. ``$STRAIT_LIBRARY`` (a path to libstrait.so), when set;
  2. the install prefix this package sits in: the folder the install rule recorded in
     ``strait/_install.py``, else ``PREFIX/lib/python3/dist-packages/strait`` ->
     ``PREFIX/lib/libstrait.so`` (also ``lib64``), as ``scripts/install.sh PREFIX`` lays it out;
  3. the build tree next to the sources: ``python/strait`` -> ``build/lib/libstrait.so``
     (``$STRAIT_BUILD_DIR`` first, when set);
  4. the dynamic loader's search path (``libstrait.so.0``, e.g. a system install).
When none loads, ImportError names every place looked at and why each failed.

Thread-safety: the C API may be called from any thread; this module keeps no state but the
loaded library.
"""

import ctypes
import os
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_uint, c_uint64, c_void_p

__all__ = ["lib", "library_path", "find_library", "StraitError", "check", "error_string",
           "Config", "Store", "STORE_SET", "STORE_GET", "STORE_ADD", "STORE_WAIT", "MatrixShape",
           "Compression", "Stats", "STATS_FIELDS"]

# straitResult_t (strait.h); names as straitGetErrorString gives them.
SUCCESS = 0
INVALID_ARGUMENT = 1
MISMATCH = 2
TIMEOUT = 3
PEER_LOST = 4
ABORTED = 5
IO_ERROR = 6
UNAVAILABLE = 7
INTERNAL_ERROR = 8
IN_PROGRESS = 9

# straitDataType_t
INT8, UINT8, INT32, INT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = 0, 1, 2, 4, 6, 7, 8, 9
# straitRedOp_t
SUM, PROD, MAX, MIN, AVG, BAND, BOR, BXOR = 0, 1, 2, 3, 4, 5, 6, 7

WAIT_DEADLINE = -1
CONFIG_UNDEF_INT = -(2**31)
CONFIG_MAGIC = 0x57A17C0F
STORE_MAGIC = 0x57A1570F
COMPRESSION_MAGIC = 0x57A1C0DF
HEADER_VERSION = 0 * 10000 + 1 * 100 + 0  # STRAIT_VERSION(0, 1, 0) of the strait.h bound here


class StraitError(RuntimeError):
    """A strait call failed. ``code`` is the straitResult_t; the message is strait's whole one
    (operation, sequence number, ranks involved, what to do)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("STRAIT_LIBRARY")
    if env:
        yield "$STRAIT_LIBRARY", env
    # Installed: the install rule writes _install.py with libstrait.so's folder relative to the
    # package (python/CMakeLists.txt), whatever STRAIT_PYTHON_INSTALL_DIR was.
    try:
        from . import _install
        yield "install prefix", os.path.normpath(os.path.join(here, _install.LIBDIR,
                                                              "libstrait.so"))
    except ImportError:
        pass
    # The default layout, PREFIX/lib/python3/dist-packages/strait -> PREFIX/lib.
    site = os.path.dirname(here)
    for up in (os.path.join(site, "..", ".."), os.path.join(site, "..", "..", "..")):
        for libdir in ("lib", "lib64", ""):
            yield "install prefix", os.path.normpath(os.path.join(up, libdir, "libstrait.so"))
    # Build tree: <root>/python/strait -> <root>/build/lib.
    root = os.path.normpath(os.path.join(here, "..", ".."))
    build = os.environ.get("STRAIT_BUILD_DIR")
    if build:
        yield "$STRAIT_BUILD_DIR", os.path.join(os.path.join(root, build), "lib", "libstrait.so")
    yield "build tree", os.path.join(root, "build", "lib", "libstrait.so")
    yield "loader search path", "libstrait.so.0"


def find_library():
    """Loads libstrait.so; returns (CDLL, path). Raises ImportError naming every place tried."""
    tried = []
    seen = set()
    for where, path in _candidates():
        if path in seen:
            continue
        seen.add(path)
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{where}: {path} (absent)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{where}: {path} ({e})")
            if where == "$STRAIT_LIBRARY":
                break  # an explicit choice that fails is an error, not a hint to look elsewhere
    raise ImportError(
        "strait: cannot load libstrait.so; looked at:\n  " + "\n  ".join(tried) +
        "\nBuild it (scripts/build.sh builds build/lib/libstrait.so), install it "
        "(scripts/install.sh PREFIX), or set STRAIT_LIBRARY=/path/to/libstrait.so.")


lib, library_path = find_library()


# ---- versioned structs ----

class Config(ctypes.Structure):
    """straitConfig_v1. Construct with Config.new() (the STRAIT_CONFIG_INITIALIZER values)."""
    _fields_ = [("size", c_size_t), ("magic", c_uint), ("version", c_uint),
                ("timeoutMs", c_int64), ("streams", c_int), ("siteCount", c_int),
                ("sites", POINTER(c_int)), ("tuneFile", c_char_p), ("tune", c_char_p),
                ("secretFile", c_char_p), ("encrypt", c_char_p)]

    @classmethod
    def new(cls):
        return cls(ctypes.sizeof(cls), CONFIG_MAGIC, HEADER_VERSION, CONFIG_UNDEF_INT,
                   CONFIG_UNDEF_INT, 0, None, None, None, None, None)


# Callback types of straitStore_t. Arguments stay raw (c_void_p, not c_char_p) so that ctypes
# makes no copies the callbacks do not need.
STORE_SET = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p, c_size_t)
STORE_GET = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int64, c_void_p, c_size_t,
                             POINTER(c_size_t))
STORE_ADD = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int64, POINTER(c_int64))
STORE_WAIT = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p), POINTER(c_size_t), c_size_t,
                              c_int64)


class Store(ctypes.Structure):
    """straitStore_v1: the store as C callbacks (STORE_SET, ...). Keep the CFUNCTYPE objects alive
    as long as any communicator created from it."""
    _fields_ = [("size", c_size_t), ("magic", c_uint), ("version", c_uint),
                ("userData", c_void_p), ("set", STORE_SET), ("get", STORE_GET),
                ("add", STORE_ADD), ("wait", STORE_WAIT)]

    @classmethod
    def new(cls, set_cb, get_cb, add_cb, wait_cb=None):
        return cls(ctypes.sizeof(cls), STORE_MAGIC, HEADER_VERSION, None, set_cb, get_cb, add_cb,
                   wait_cb if wait_cb is not None else STORE_WAIT())


class MatrixShape(ctypes.Structure):
    """straitMatrixShape_t: rows x cols elements, row-major, `offset` elements into the buffer."""
    _fields_ = [("offset", c_int64), ("rows", c_int64), ("cols", c_int64)]


class Compression(ctypes.Structure):
    """straitCompression_v1. Construct with Compression.new(codec, key, matrices, count)."""
    _fields_ = [("size", c_size_t), ("magic", c_uint), ("version", c_uint),
                ("codec", c_char_p), ("key", c_char_p), ("matrices", POINTER(MatrixShape)),
                ("matrixCount", c_int64)]

    @classmethod
    def new(cls, codec, key=None, matrices=None, count=0):
        """codec and key as bytes; matrices: a ctypes array of `count` MatrixShape, or None."""
        return cls(ctypes.sizeof(cls), COMPRESSION_MAGIC, HEADER_VERSION, codec, key, matrices,
                   count)


STATS_FIELDS = ["allreduceBytes", "broadcastBytes", "allgatherBytes", "sendBytes",
                "reduceScatterBytes", "reduceBytes", "gatherBytes", "scatterBytes",
                "alltoallBytes", "symmetricBytes"]


class Stats(ctypes.Structure):
    """straitStats_v1: payload bytes sent, by operation, and bytes read in place from peers'
    straitMemAlloc buffers (symmetricBytes). Construct with Stats.new()."""
    _fields_ = [("size", c_size_t)] + [(f, c_uint64) for f in STATS_FIELDS]

    @classmethod
    def new(cls):
        return cls(ctypes.sizeof(cls))


# ---- functions ----

_R = c_int  # straitResult_t
_P = c_void_p
_I64 = c_int64
_PP = POINTER(c_void_p)

_SIGNATURES = {
    "straitGetVersion": (_R, [POINTER(c_int)]),
    "straitGetErrorString": (c_char_p, [c_int]),
    "straitGetLastError": (c_char_p, [_P]),
    "straitCommInitStore": (_R, [_PP, c_int, c_int, POINTER(Store), POINTER(Config)]),
    "straitCommSplit": (_R, [_P, c_int, c_int, _PP]),
    "straitCommAbort": (_R, [_P, c_char_p]),
    "straitCommDestroy": (_R, [_P]),
    "straitCommCount": (_R, [_P, POINTER(c_int)]),
    "straitCommUserRank": (_R, [_P, POINTER(c_int)]),
    "straitCommSetTimeout": (_R, [_P, _I64]),
    "straitCommGetTimeout": (_R, [_P, POINTER(_I64)]),
    "straitCommGetStats": (_R, [_P, POINTER(Stats)]),
    # (comm, size in bytes, *ptr) / (comm, ptr): symmetric memory, collective allocation
    "straitMemAlloc": (_R, [_P, c_size_t, _PP]),
    "straitMemFree": (_R, [_P, _P]),
    "straitTest": (_R, [_P]),
    "straitWait": (_R, [_P, _I64]),
    "straitRequestGetError": (c_char_p, [_P]),
    "straitRequestFree": (_R, [_P]),
    # (send, recv, count, dtype, op, comm, stream[, request])
    "straitAllReduce": (_R, [_P, _P, _I64, c_int, c_int, _P, _P]),
    "straitAllReduceAsync": (_R, [_P, _P, _I64, c_int, c_int, _P, _P, _PP]),
    # (send, recv, count, dtype, op, compression, comm[, request])
    "straitAllReduceCompressed": (_R, [_P, _P, _I64, c_int, c_int, POINTER(Compression), _P]),
    "straitAllReduceCompressedAsync": (_R, [_P, _P, _I64, c_int, c_int, POINTER(Compression),
                                            _P, _PP]),
    "straitBroadcast": (_R, [_P, _I64, c_int, c_int, _P, _P]),
    "straitBroadcastAsync": (_R, [_P, _I64, c_int, c_int, _P, _P, _PP]),
    "straitReduce": (_R, [_P, _P, _I64, c_int, c_int, c_int, _P, _P]),
    "straitReduceAsync": (_R, [_P, _P, _I64, c_int, c_int, c_int, _P, _P, _PP]),
    "straitAllGather": (_R, [_P, _P, _I64, c_int, _P, _P]),
    "straitAllGatherV": (_R, [_P, _P, POINTER(_I64), c_int, _P]),
    "straitReduceScatter": (_R, [_P, _P, _I64, c_int, c_int, _P, _P]),
    "straitReduceScatterV": (_R, [_P, _P, POINTER(_I64), c_int, c_int, _P]),
    "straitGather": (_R, [_P, _P, _I64, c_int, c_int, _P, _P]),
    "straitScatter": (_R, [_P, _P, _I64, c_int, c_int, _P, _P]),
    "straitAllToAll": (_R, [_P, _P, _I64, c_int, _P, _P]),
    "straitAllToAllV": (_R, [_P, POINTER(_I64), _P, POINTER(_I64), c_int, _P]),
    "straitSend": (_R, [_P, _I64, c_int, c_int, c_uint64, _P, _P]),
    "straitRecv": (_R, [_P, _I64, c_int, c_int, c_uint64, _P, _P]),
    "straitAllGatherAsync": (_R, [_P, _P, _I64, c_int, _P, _P, _PP]),
    "straitAllGatherVAsync": (_R, [_P, _P, POINTER(_I64), c_int, _P, _PP]),
    "straitReduceScatterAsync": (_R, [_P, _P, _I64, c_int, c_int, _P, _P, _PP]),
    "straitReduceScatterVAsync": (_R, [_P, _P, POINTER(_I64), c_int, c_int, _P, _PP]),
    "straitGatherAsync": (_R, [_P, _P, _I64, c_int, c_int, _P, _P, _PP]),
    "straitScatterAsync": (_R, [_P, _P, _I64, c_int, c_int, _P, _P, _PP]),
    "straitAllToAllAsync": (_R, [_P, _P, _I64, c_int, _P, _P, _PP]),
    "straitAllToAllVAsync": (_R, [_P, POINTER(_I64), _P, POINTER(_I64), c_int, _P, _PP]),
    "straitBarrier": (_R, [_P]),
    "straitBarrierAsync": (_R, [_P, _PP]),
    "straitSendAsync": (_R, [_P, _I64, c_int, c_int, c_uint64, _P, _P, _PP]),
    "straitRecvAsync": (_R, [_P, _I64, c_int, c_int, c_uint64, _P, _P, _PP]),
    # (recv, count, dtype, tag, comm, stream, request): from any rank
    "straitRecvAnyAsync": (_R, [_P, _I64, c_int, c_uint64, _P, _P, _PP]),
    "straitRequestGetSource": (_R, [_P, POINTER(c_int)]),
    "straitCommGetSequenceNumber": (_R, [_P, POINTER(c_uint64)]),
}

for _name, (_restype, _argtypes) in _SIGNATURES.items():
    try:
        _fn = getattr(lib, _name)
    except AttributeError as e:
        raise ImportError(f"strait: {library_path} has no {_name}: it is older than this Python "
                          "package; rebuild or reinstall both from one source tree") from e
    _fn.restype = _restype
    _fn.argtypes = _argtypes
    globals()[_name] = _fn


def error_string(code):
    """The name and meaning of a straitResult_t ("straitTimeout: ...")."""
    s = lib.straitGetErrorString(code)
    return s.decode("utf-8", "replace") if s else f"straitResult_t {code}"


def last_error(comm):
    """The whole message of the last failure on comm (None: on this thread)."""
    s = lib.straitGetLastError(comm)
    return s.decode("utf-8", "replace") if s else ""


def check(code, comm, what):
    """Raises StraitError for a failed call: strait's whole message, else the code's name."""
    if code != SUCCESS:
        message = last_error(comm) or error_string(code)
        raise StraitError(code, f"strait: {what} failed: {message}")


def version():
    """The library's STRAIT_VERSION_CODE (major * 10000 + minor * 100 + patch)."""
    v = c_int()
    check(lib.straitGetVersion(ctypes.byref(v)), None, "straitGetVersion")
    return v.value
