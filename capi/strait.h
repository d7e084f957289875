/** \file
 * strait.h: the C API of strait, for frameworks and languages that cannot take its C++ classes
 * (C, ctypes/cffi, Rust, Julia, a torch.distributed backend). C99; needs no CUDA header.
 *
 * Conventions (those of nccl.h): opaque handles; every function that can fail returns a
 * straitResult_t; straitGetErrorString(result) names a code and straitGetLastError(comm) gives
 * the whole message of the last failure (the operation, its sequence number and the ranks
 * involved, and what to do); versioned structs set up with an initializer macro.
 *
 * Semantics are those of the C++ Communicator (comm/communicator.h): every collective has a
 * blocking form and a non-blocking form (suffix Async, giving a straitRequest_t); operations of
 * one communicator must be called in the same order on every rank; buffers stay owned by the
 * caller and must stay valid until the operation has finished; send == recv means in place;
 * every operation fails within the communicator's timeout rather than hang, and after a failure
 * the communicator is unusable (destroy it). Blocking forms return once the operation has
 * finished, device ones included (NCCL's calls only enqueue: use the Async form to overlap).
 *
 * Device buffers: where an operation's buffers are CUDA device memory, it runs on NCCL, enqueued
 * on `stream` (a cudaStream_t, passed as void*; NULL is the legacy default stream) in program
 * order; host buffers ignore the stream. The first device operation of a communicator must be a
 * collective, one rank per GPU. Mixing host and device buffers in one call is
 * straitInvalidArgument; a build without NCCL reports device buffers as straitUnavailable.
 *
 * Counts are int64_t elements of the datatype (torch's sizes are int64_t); negative counts, NULL
 * or destroyed handles, unknown enum values and NULL out-pointers are straitInvalidArgument, never
 * a crash: handles are checked against the live ones (a destroyed handle is never reused).
 * No C++ exception leaves the library.
 *
 * Thread-safety: every function may be called from any thread. straitCommAbort is meant to be
 * called from another thread than the one blocked in an operation. Operation order must still be
 * the same on every rank, so most programs issue a communicator's operations from one thread.
 */
#ifndef STRAIT_STRAIT_H_
#define STRAIT_STRAIT_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/** Major version of this header. */
#define STRAIT_MAJOR 0
/** Minor version of this header. */
#define STRAIT_MINOR 1
/** Patch version of this header. */
#define STRAIT_PATCH 0
/** The version code of X.Y.Z: X * 10000 + Y * 100 + Z. */
#define STRAIT_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
/** This header's version code (compare with straitGetVersion's). */
#define STRAIT_VERSION_CODE STRAIT_VERSION(STRAIT_MAJOR, STRAIT_MINOR, STRAIT_PATCH)

/* Marks the functions libstrait.so exports (it is built with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define STRAIT_C_EXPORT __attribute__((visibility("default")))
#else
#define STRAIT_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** A communicator (an opaque handle): from straitCommInit*, freed by straitCommDestroy. */
typedef struct straitComm* straitComm_t;
/** A non-blocking operation's handle, from an ...Async call; free it with straitRequestFree. */
typedef struct straitRequest* straitRequest_t;
/** A cudaStream_t (pass yours unchanged); NULL is the legacy default stream. */
typedef void* straitStream_t;

/** No communicator. */
#define STRAIT_COMM_NULL NULL
/** No request. */
#define STRAIT_REQUEST_NULL NULL

/** Result codes: success, one per strait::ErrorCode (core/error.h), and straitInProgress. */
typedef enum {
  straitSuccess = 0,
  straitInvalidArgument = 1, /**< the caller passed something wrong: the message says what */
  straitMismatch = 2,        /**< ranks disagree about an operation (count, dtype, kind, order) */
  straitTimeout = 3,         /**< an operation or a wait did not finish within its deadline */
  straitPeerLost = 4,        /**< a peer process died or its connection broke */
  straitAborted = 5,         /**< straitCommAbort was called, or the communicator destroyed */
  straitIoError = 6,         /**< a file or device operation failed */
  straitUnavailable = 7,     /**< a feature is not in this build or on this machine (CUDA, NCCL) */
  straitInternalError = 8,   /**< a bug in strait (or out of memory): please report it */
  straitInProgress = 9,      /**< straitTest: the operation has not finished yet */
  straitNumResults = 10
} straitResult_t;

/** Element types; the values of nccl.h's ncclDataType_t for the same types (3 and 5, NCCL's
 * uint32 and uint64, are not strait types and are straitInvalidArgument). */
typedef enum {
  straitInt8 = 0,
  straitUint8 = 1,
  straitInt32 = 2,
  straitInt64 = 4,
  straitFloat16 = 6, /**< IEEE binary16 */
  straitFloat32 = 7,
  straitFloat64 = 8,
  straitBfloat16 = 9,
  straitNumTypes = 10
} straitDataType_t;

/** Reductions, with nccl.h's values for the first five. Integers wrap; avg is defined for
 * floating-point types only (sum, then divide by the number of ranks). Min and max keep the local
 * element when a NaN is involved (comm's reduce.h gives the exact rules). The bitwise ops (and,
 * or, xor; strait's own, NCCL has none) take integer types only, on host buffers: a
 * floating-point type, or a device buffer, is straitInvalidArgument. */
typedef enum {
  straitSum = 0,
  straitProd = 1,
  straitMax = 2,
  straitMin = 3,
  straitAvg = 4,
  straitBand = 5, /**< bitwise and, integer types only */
  straitBor = 6,  /**< bitwise or, integer types only */
  straitBxor = 7, /**< bitwise xor, integer types only */
  straitNumOps = 8
} straitRedOp_t;

/* Unset fields of the versioned structs below. */
/** The value of an int field of straitConfig_t left unset. */
#define STRAIT_CONFIG_UNDEF_INT INT_MIN
/** straitCommSplit's color for ranks that take part in no new communicator. */
#define STRAIT_SPLIT_NOCOLOR (-1)
/** straitWait: no timeout of its own (the operation's deadline, the communicator's timeout, still
 * bounds the wait). */
#define STRAIT_WAIT_DEADLINE (-1)

/** How a communicator is created. Set it up with STRAIT_CONFIG_INITIALIZER, then change fields; a
 * field left unset takes the environment's value (as the C++ CommOptions). A NULL config means
 * every field unset. Fields are appended in later versions (size and version tell the library
 * which ones the program knows); never reorder them. */
typedef struct straitConfig_v1 {
  size_t size;          /**< sizeof(straitConfig_t): set by the initializer */
  unsigned int magic;   /**< STRAIT_CONFIG_MAGIC: set by the initializer */
  unsigned int version; /**< STRAIT_VERSION_CODE of the header: set by the initializer */
  /** Deadline of every operation and of connecting, in milliseconds (1 .. 1e9). Unset:
   * STRAIT_TIMEOUT_S, else 300 s. */
  int64_t timeoutMs;
  /** Connections per peer on another host, 1 .. 8, the same on every rank. Unset: STRAIT_STREAMS,
   * else 1. */
  int streams;
  /** The site (0, 1, ...) of each world rank, siteCount entries (the world size), for the
   * hierarchical allreduce. NULL: STRAIT_SITES, then STRAIT_TOPOLOGY_FILE, else one site. */
  int siteCount;
  /** siteCount entries: the site of each world rank (NULL: from the environment). */
  const int* sites;
  /** A JSON file of algorithm and codec rules, as `strait tune` writes it. NULL: STRAIT_TUNE_FILE.
   */
  const char* tuneFile;
  /** Rules in STRAIT_TUNE syntax, applied after tuneFile's. NULL: STRAIT_TUNE. */
  const char* tune;
  /** Added after the first release (older callers pass a shorter struct: NULL): the shared secret,
   * a file of at least 16 bytes that only its owner may read (mode 0600). With it, every store
   * connection proves the secret before it reads or writes, and links between sites are sealed
   * (XChaCha20-Poly1305). A rank with another secret fails with straitMismatch naming the file.
   * NULL: STRAIT_SECRET_FILE; "": none. */
  const char* secretFile;
  /** Which links are sealed: "sites", "all" or "off", the same on every rank. NULL:
   * STRAIT_ENCRYPT, else "sites" with a secret and "off" without. */
  const char* encrypt;
} straitConfig_t;

/** straitConfig_t::magic. */
#define STRAIT_CONFIG_MAGIC 0x57a17c0fu
/** A straitConfig_t with every field unset. */
#define STRAIT_CONFIG_INITIALIZER                                                              \
  {                                                                                            \
    sizeof(straitConfig_t), STRAIT_CONFIG_MAGIC, STRAIT_VERSION_CODE, STRAIT_CONFIG_UNDEF_INT, \
        STRAIT_CONFIG_UNDEF_INT, 0, NULL, NULL, NULL, NULL, NULL                               \
  }

/** A key-value store given as C callbacks, for bootstrapping over a store the program already has
 * (torch.distributed's c10d Store: no second port). Designed for Python ctypes: plain C types,
 * bytes as pointer + length, errors as return codes. Keys are bytes; key[keyLength] is a NUL
 * byte, so a callback may also read the key as a C string.
 *
 * Each callback returns 0 (straitSuccess) or a straitResult_t: straitTimeout when the keys did
 * not appear within timeoutMs, straitPeerLost when the store cannot be reached, any other code
 * for other failures (it becomes the error of the strait call that used the store).
 *   set:  stores valueLength bytes under key (replacing an old value).
 *   get:  waits up to timeoutMs for key to exist, then copies min(its length, capacity) bytes of
 *         its value to `value` (NULL when capacity is 0) and sets *valueLength to its full length;
 *         strait calls again with a larger buffer when the value did not fit.
 *   add:  adds delta to the integer counter under key (a missing key counts as 0) and sets
 *         *result to the new value; atomic across ranks.
 *   wait: optional (NULL: strait calls get for each key): waits up to timeoutMs until all
 *         keyCount keys exist.
 * Callbacks run on the threads that call straitCommInitStore, straitCommSplit and the first
 * device operation of a communicator, so possibly on several threads at once; they must not call
 * back into strait. userData and the callbacks must stay valid until every communicator created
 * from this store (splits included) has been destroyed. Set it up with STRAIT_STORE_INITIALIZER. */
typedef struct straitStore_v1 {
  /** sizeof(straitStore_t): set by the initializer. */
  size_t size;
  /** STRAIT_STORE_MAGIC: set by the initializer. */
  unsigned int magic;
  /** STRAIT_VERSION_CODE of the header: set by the initializer. */
  unsigned int version;
  /** Passed unchanged to every callback. */
  void* userData;
  /** Stores valueLength bytes under key; returns 0 or a straitResult_t. */
  int (*set)(void* userData, const char* key, size_t keyLength, const void* value,
             size_t valueLength);
  /** Waits up to timeoutMs for key, copies up to capacity bytes and sets *valueLength to the
   * value's length. */
  int (*get)(void* userData, const char* key, size_t keyLength, int64_t timeoutMs, void* value,
             size_t capacity, size_t* valueLength);
  /** Adds delta to the counter at key (missing: 0) and sets *result to the new value; atomic. */
  int (*add)(void* userData, const char* key, size_t keyLength, int64_t delta, int64_t* result);
  /** Optional (NULL: get for each key): waits up to timeoutMs until all keyCount keys exist. */
  int (*wait)(void* userData, const char* const* keys, const size_t* keyLengths, size_t keyCount,
              int64_t timeoutMs);
} straitStore_t;

/** straitStore_t::magic. */
#define STRAIT_STORE_MAGIC 0x57a1570fu
/** A straitStore_t with no callbacks: set userData and set, get, add (and optionally wait). */
#define STRAIT_STORE_INITIALIZER \
  { sizeof(straitStore_t), STRAIT_STORE_MAGIC, STRAIT_VERSION_CODE, NULL, NULL, NULL, NULL, NULL }

/** One weight matrix inside a compressed allreduce's buffer: rows x cols elements, row-major and
 * contiguous, starting `offset` elements in (PowerSGD). */
typedef struct {
  /** First element of the matrix in the buffer. */
  int64_t offset;
  /** Rows of the matrix. */
  int64_t rows;
  /** Columns of the matrix (element (i, j) at offset + i * cols + j). */
  int64_t cols;
} straitMatrixShape_t;

/** How a compressed allreduce encodes its messages. Set it up with STRAIT_COMPRESSION_INITIALIZER.
 *   codec:    a spec, "name" or "name:key=value,...": "bf16", "fp16", "int8", "int4:block=32",
 *             "onebit", "topk:fraction=0.01", "powersgd:rank=4", or "auto" (the codec the tuned
 *             rules give this size; plain allreduce when none). Every rank must pass the same.
 *   key:      error feedback's key, a stable name of the tensor (a gradient bucket); NULL or "":
 *             no error feedback. One operation per key at a time.
 *   matrices: PowerSGD only: matrixCount disjoint weight matrices inside the buffer; elements
 *             outside them go uncompressed. NULL / 0: the whole buffer as one near-square matrix.
 */
typedef struct straitCompression_v1 {
  /** sizeof(straitCompression_t): set by the initializer. */
  size_t size;
  /** STRAIT_COMPRESSION_MAGIC: set by the initializer. */
  unsigned int magic;
  /** STRAIT_VERSION_CODE of the header: set by the initializer. */
  unsigned int version;
  /** The codec spec ("int8" by default; see above). */
  const char* codec;
  /** Error feedback's key; NULL or "": none. */
  const char* key;
  /** PowerSGD's weight matrices (matrixCount entries); NULL: the whole buffer. */
  const straitMatrixShape_t* matrices;
  /** Entries of matrices. */
  int64_t matrixCount;
} straitCompression_t;

/** straitCompression_t::magic. */
#define STRAIT_COMPRESSION_MAGIC 0x57a1c0dfu
/** A straitCompression_t for int8 without error feedback. */
#define STRAIT_COMPRESSION_INITIALIZER                                                        \
  {                                                                                           \
    sizeof(straitCompression_t), STRAIT_COMPRESSION_MAGIC, STRAIT_VERSION_CODE, "int8", NULL, \
        NULL, 0                                                                               \
  }

/** Payload bytes this rank has sent since the communicator was created, by operation (host
 * buffers only: NCCL does not report what it sends). Set `size` with STRAIT_STATS_INITIALIZER;
 * the library fills the fields that fit in it. */
typedef struct straitStats_v1 {
  /** sizeof(straitStats_t): set by STRAIT_STATS_INITIALIZER. */
  size_t size;
  uint64_t allreduceBytes; /**< allreduce and compressed allreduce */
  /** broadcast. */
  uint64_t broadcastBytes;
  uint64_t allgatherBytes; /**< allgather and allgatherv */
  /** send (point to point). */
  uint64_t sendBytes;
  uint64_t reduceScatterBytes; /**< reducescatter and reducescatterv */
  /** reduce. */
  uint64_t reduceBytes;
  /** gather. */
  uint64_t gatherBytes;
  /** scatter. */
  uint64_t scatterBytes;
  uint64_t alltoallBytes; /**< alltoall and alltoallv */
  /** Added after the first release (a shorter struct leaves it out): bytes this rank read in
   * place out of its mappings of peers' straitMemAlloc buffers, with no system call or staging
   * copy; it grows only where a collective's buffers come from straitMemAlloc. */
  uint64_t symmetricBytes;
} straitStats_t;

/** A straitStats_t whose size is set and counters zero. */
#define STRAIT_STATS_INITIALIZER \
  { sizeof(straitStats_t), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* ---- Library ---- */

/** *version = STRAIT_VERSION_CODE of the library (compare with the header's). */
STRAIT_C_EXPORT straitResult_t straitGetVersion(int* version);
/** A static string naming the code ("straitTimeout: ..."); never NULL. */
STRAIT_C_EXPORT const char* straitGetErrorString(straitResult_t result);
/** The full message of the last failure of a call on comm or on one of its requests ("" if
 * none); with comm NULL, of the last failed call on this thread (e.g. a failed init). The string
 * stays valid until this thread calls straitGetLastError again. */
STRAIT_C_EXPORT const char* straitGetLastError(straitComm_t comm);

/* ---- Communicators ---- */

/** The world communicator of a job launched with torchrun's environment (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT): torchrun, `strait run`, Slurm or mpirun wrappers. Rank 0 serves the
 * job's store at MASTER_ADDR:MASTER_PORT. Collective: returns once every rank has connected. */
STRAIT_C_EXPORT straitResult_t straitCommInitFromEnv(straitComm_t* comm,
                                                     const straitConfig_t* config);
/** The same with the job given explicitly: rank of nranks; rank 0 serves the store at
 * address:port (1 .. 65535), the others connect to it. */
STRAIT_C_EXPORT straitResult_t straitCommInitRank(straitComm_t* comm, int nranks, int rank,
                                                  const char* address, int port,
                                                  const straitConfig_t* config);
/** The same over a store the program provides (copied; see straitStore_t for its lifetime). Keys
 * strait writes begin with "strait/"; a store shared by several jobs needs a prefix per job. */
STRAIT_C_EXPORT straitResult_t straitCommInitStore(straitComm_t* comm, int nranks, int rank,
                                                   const straitStore_t* store,
                                                   const straitConfig_t* config);
/** MPI_Comm_split / ncclCommSplit: ranks with the same color form *newcomm, ordered by (key, rank);
 * color STRAIT_SPLIT_NOCOLOR (any negative) gives *newcomm = NULL. Collective over comm. The new
 * communicator inherits comm's configuration. */
STRAIT_C_EXPORT straitResult_t straitCommSplit(straitComm_t comm, int color, int key,
                                               straitComm_t* newcomm);
/** Fails every pending operation of comm with straitAborted (at once, from any thread: a thread
 * blocked in one of them returns), and every later one. reason (NULL: "straitCommAbort was
 * called") goes into their messages. Unlike ncclCommAbort it does not free comm: destroy it. */
STRAIT_C_EXPORT straitResult_t straitCommAbort(straitComm_t comm, const char* reason);
/** Frees comm; its pending operations fail with straitAborted (their requests stay valid until
 * freed), and its straitMemAlloc buffers not yet freed are freed. A call on comm still running in
 * another thread finishes first. */
STRAIT_C_EXPORT straitResult_t straitCommDestroy(straitComm_t comm);
/** *count = the number of ranks in comm. */
STRAIT_C_EXPORT straitResult_t straitCommCount(straitComm_t comm, int* count);
/** *rank = this process's rank in comm, 0 .. count - 1. */
STRAIT_C_EXPORT straitResult_t straitCommUserRank(straitComm_t comm, int* rank);
/** The deadline of operations submitted from now on, in milliseconds (1 .. 1e9). */
STRAIT_C_EXPORT straitResult_t straitCommSetTimeout(straitComm_t comm, int64_t timeoutMs);
/** *timeoutMs = the deadline of operations submitted from now on. */
STRAIT_C_EXPORT straitResult_t straitCommGetTimeout(straitComm_t comm, int64_t* timeoutMs);
/** *sequence = the sequence number comm's next collective takes: strait's own count, equal on
 * ranks that issued the same collectives (a collective may take several numbers; point-to-point
 * operations take none). Thread-safe. */
STRAIT_C_EXPORT straitResult_t straitCommGetSequenceNumber(straitComm_t comm, uint64_t* sequence);
/** Fills stats (up to stats->size bytes) with the payload bytes comm has sent, by operation. */
STRAIT_C_EXPORT straitResult_t straitCommGetStats(straitComm_t comm, straitStats_t* stats);

/* ---- Symmetric memory ----
 * Buffers that every rank of comm on this host maps once (memfd-backed, shared with the local
 * peers; comm/symmetric_memory.h): a host collective whose buffers come from here reads and
 * reduces the peers' data straight out of its mappings, with no per-call pinning, system call or
 * staging copy (straitStats_t.symmetricBytes counts those bytes): the single-copy algorithms
 * (allgather, reduce-scatter, alltoall, gather, scatter, reduce from 64 KiB a block by default),
 * and every other algorithm's large messages between local ranks (the 2-rank ring allreduce, the
 * broadcast tree), and from 3 ranks the mailbox allreduce of vectors of 256 KiB / ranks and more,
 * which reduces them from the peers' mappings instead of copying them into its slots.
 * Ordinary memory keeps working everywhere, mixed freely with these buffers per rank; where comm's
 * ranks are on several hosts the buffers are ordinary memory. nccl.h's ncclMemAlloc / ncclMemFree,
 * but with the communicator, because allocation is collective. */

/** *ptr = size bytes (page-aligned, zero-filled), symmetric over comm. Collective: every rank of
 * comm calls it with the same size, in the same order with respect to comm's other collectives
 * (it returns once every rank has called it, as a blocking collective does). comm keeps the buffer
 * until straitMemFree or straitCommDestroy (which frees what is left: never touch a buffer after
 * destroying its communicator); the memory goes with the job either way (no name, nothing on disk).
 * Errors: straitInvalidArgument (size 0, ptr NULL, ranks asking for different sizes: every rank
 * fails, naming the sizes), straitTimeout (a rank did not call it within comm's timeout),
 * straitUnavailable (memfd, mmap or pidfd_getfd refused: the message says which). *ptr is NULL on
 * failure. Thread-safety: any thread, but a communicator's allocations in one order on every
 * rank. */
STRAIT_C_EXPORT straitResult_t straitMemAlloc(straitComm_t comm, size_t size, void** ptr);
/** Frees a buffer straitMemAlloc gave on comm (ptr exactly as given). Not collective: a peer
 * still reading this buffer's id falls back to copying; no operation may still be using it.
 * straitInvalidArgument (comm stays usable) for NULL, a pointer that is not the start of a live
 * straitMemAlloc buffer of comm (freed already, another communicator's, inside a buffer, not
 * from straitMemAlloc): the message says which. Thread-safety: any thread. */
STRAIT_C_EXPORT straitResult_t straitMemFree(straitComm_t comm, void* ptr);

/* ---- Requests (the non-blocking forms) ---- */

/** straitSuccess when the operation has finished, straitInProgress while it runs, its error code
 * when it failed. Never blocks. */
STRAIT_C_EXPORT straitResult_t straitTest(straitRequest_t request);
/** Blocks until the operation finishes; returns straitSuccess or its error. timeoutMs >= 0 gives
 * up after that long: the operation is then failed with straitTimeout (its buffers may be reused,
 * so it must not finish later) and the communicator is unusable, so poll with straitTest.
 * STRAIT_WAIT_DEADLINE: only the operation's own deadline bounds the wait. */
STRAIT_C_EXPORT straitResult_t straitWait(straitRequest_t request, int64_t timeoutMs);
/** The operation's error message once it has failed, else ""; valid until the request is freed. */
STRAIT_C_EXPORT const char* straitRequestGetError(straitRequest_t request);
/** A receive from any source (straitRecvAnyAsync): *source = the rank whose message it received,
 * once it has completed; straitInProgress (source untouched) while it runs. straitInvalidArgument
 * for any other request. Thread-safe. */
STRAIT_C_EXPORT straitResult_t straitRequestGetSource(straitRequest_t request, int* source);
/** Frees the handle. An operation still running goes on (its buffers must stay valid until it
 * finishes), as after MPI_Request_free. */
STRAIT_C_EXPORT straitResult_t straitRequestFree(straitRequest_t request);
/** A completion callback: user is straitRequestOnComplete's, result straitSuccess or the
 * operation's error code (its message: straitRequestGetError). */
typedef void (*straitCompletionFn_t)(void* user, straitResult_t result);
/** Calls fn(user, result) once when the request's operation finishes, so a framework can complete
 * its own future without a thread that waits (the torch backend's C++ Works do). fn runs on the
 * thread that finishes the operation (strait's progress thread, or one in straitWait), or here at
 * once when it has finished already. It must return quickly and must not block on strait
 * (straitWait, a blocking collective) nor free the request: it runs where strait moves bytes.
 * straitTest, straitRequestGetError and straitRequestGetSource are safe in it. Several callbacks
 * may be registered; a request freed before its operation finishes still calls them.
 * straitInvalidArgument for a NULL fn or an unknown request. Thread-safety: any thread. */
STRAIT_C_EXPORT straitResult_t straitRequestOnComplete(straitRequest_t request,
                                                       straitCompletionFn_t fn, void* user);

/* ---- Collectives ----
 * "Block r" is rank r's part of a buffer, blocks packed in rank order; P is the number of ranks.
 * Each operation has a blocking form and an Async form whose last argument receives a request
 * (free it with straitRequestFree). */

/** recv[i] = op over ranks of send[i], i < count. */
STRAIT_C_EXPORT straitResult_t straitAllReduce(const void* sendbuff, void* recvbuff, int64_t count,
                                               straitDataType_t datatype, straitRedOp_t op,
                                               straitComm_t comm, straitStream_t stream);
/** Non-blocking straitAllReduce: *request completes when it has finished. */
STRAIT_C_EXPORT straitResult_t straitAllReduceAsync(const void* sendbuff, void* recvbuff,
                                                    int64_t count, straitDataType_t datatype,
                                                    straitRedOp_t op, straitComm_t comm,
                                                    straitStream_t stream,
                                                    straitRequest_t* request);

/** Compressed allreduce (host float32, sum or avg) for bandwidth-bound links: lossy, but
 * bit-identical on every rank. A NaN or Inf in sendbuff is straitInvalidArgument (found before
 * anything is sent; the other ranks then time out naming this rank). */
STRAIT_C_EXPORT straitResult_t straitAllReduceCompressed(const void* sendbuff, void* recvbuff,
                                                         int64_t count, straitDataType_t datatype,
                                                         straitRedOp_t op,
                                                         const straitCompression_t* compression,
                                                         straitComm_t comm);
/** Non-blocking straitAllReduceCompressed. */
STRAIT_C_EXPORT straitResult_t straitAllReduceCompressedAsync(
    const void* sendbuff, void* recvbuff, int64_t count, straitDataType_t datatype,
    straitRedOp_t op, const straitCompression_t* compression, straitComm_t comm,
    straitRequest_t* request);

/** buff: count elements, in place; root's values end up on every rank. */
STRAIT_C_EXPORT straitResult_t straitBroadcast(void* buff, int64_t count, straitDataType_t datatype,
                                               int root, straitComm_t comm, straitStream_t stream);
/** Non-blocking straitBroadcast. */
STRAIT_C_EXPORT straitResult_t straitBroadcastAsync(void* buff, int64_t count,
                                                    straitDataType_t datatype, int root,
                                                    straitComm_t comm, straitStream_t stream,
                                                    straitRequest_t* request);

/** root's recv (count elements; NULL elsewhere) = op over ranks of send (count elements). */
STRAIT_C_EXPORT straitResult_t straitReduce(const void* sendbuff, void* recvbuff, int64_t count,
                                            straitDataType_t datatype, straitRedOp_t op, int root,
                                            straitComm_t comm, straitStream_t stream);
/** Non-blocking straitReduce. */
STRAIT_C_EXPORT straitResult_t straitReduceAsync(const void* sendbuff, void* recvbuff,
                                                 int64_t count, straitDataType_t datatype,
                                                 straitRedOp_t op, int root, straitComm_t comm,
                                                 straitStream_t stream, straitRequest_t* request);

/** recv (P * sendcount elements) = every rank's send, in rank order. In place when send is block
 * rank of recv. */
STRAIT_C_EXPORT straitResult_t straitAllGather(const void* sendbuff, void* recvbuff,
                                               int64_t sendcount, straitDataType_t datatype,
                                               straitComm_t comm, straitStream_t stream);
/** Non-blocking straitAllGather. */
STRAIT_C_EXPORT straitResult_t straitAllGatherAsync(const void* sendbuff, void* recvbuff,
                                                    int64_t sendcount, straitDataType_t datatype,
                                                    straitComm_t comm, straitStream_t stream,
                                                    straitRequest_t* request);
/** As AllGather with P counts (recvcounts[r]: rank r's elements, the same array on every rank);
 * send has recvcounts[rank] elements. Host buffers only. */
STRAIT_C_EXPORT straitResult_t straitAllGatherV(const void* sendbuff, void* recvbuff,
                                                const int64_t* recvcounts,
                                                straitDataType_t datatype, straitComm_t comm);
/** Non-blocking straitAllGatherV. */
STRAIT_C_EXPORT straitResult_t straitAllGatherVAsync(const void* sendbuff, void* recvbuff,
                                                     const int64_t* recvcounts,
                                                     straitDataType_t datatype, straitComm_t comm,
                                                     straitRequest_t* request);

/** send: P * recvcount elements, block r for rank r; recv (recvcount) = op over ranks of block
 * rank. In place when recv is block rank of send. */
STRAIT_C_EXPORT straitResult_t straitReduceScatter(const void* sendbuff, void* recvbuff,
                                                   int64_t recvcount, straitDataType_t datatype,
                                                   straitRedOp_t op, straitComm_t comm,
                                                   straitStream_t stream);
/** Non-blocking straitReduceScatter. */
STRAIT_C_EXPORT straitResult_t straitReduceScatterAsync(const void* sendbuff, void* recvbuff,
                                                        int64_t recvcount,
                                                        straitDataType_t datatype, straitRedOp_t op,
                                                        straitComm_t comm, straitStream_t stream,
                                                        straitRequest_t* request);
/** As ReduceScatter with P block sizes (the same array on every rank). Host buffers only. */
STRAIT_C_EXPORT straitResult_t straitReduceScatterV(const void* sendbuff, void* recvbuff,
                                                    const int64_t* recvcounts,
                                                    straitDataType_t datatype, straitRedOp_t op,
                                                    straitComm_t comm);
/** Non-blocking straitReduceScatterV. */
STRAIT_C_EXPORT straitResult_t straitReduceScatterVAsync(const void* sendbuff, void* recvbuff,
                                                         const int64_t* recvcounts,
                                                         straitDataType_t datatype,
                                                         straitRedOp_t op, straitComm_t comm,
                                                         straitRequest_t* request);

/** Every rank's send (sendcount elements) to root's recv (P * sendcount, rank-major; NULL
 * elsewhere). */
STRAIT_C_EXPORT straitResult_t straitGather(const void* sendbuff, void* recvbuff, int64_t sendcount,
                                            straitDataType_t datatype, int root, straitComm_t comm,
                                            straitStream_t stream);
/** Non-blocking straitGather. */
STRAIT_C_EXPORT straitResult_t straitGatherAsync(const void* sendbuff, void* recvbuff,
                                                 int64_t sendcount, straitDataType_t datatype,
                                                 int root, straitComm_t comm, straitStream_t stream,
                                                 straitRequest_t* request);

/** root's send (P * recvcount, rank-major; NULL elsewhere): block r to rank r's recv. */
STRAIT_C_EXPORT straitResult_t straitScatter(const void* sendbuff, void* recvbuff,
                                             int64_t recvcount, straitDataType_t datatype, int root,
                                             straitComm_t comm, straitStream_t stream);
/** Non-blocking straitScatter. */
STRAIT_C_EXPORT straitResult_t straitScatterAsync(const void* sendbuff, void* recvbuff,
                                                  int64_t recvcount, straitDataType_t datatype,
                                                  int root, straitComm_t comm,
                                                  straitStream_t stream, straitRequest_t* request);

/** send and recv: P * count elements; block j of send goes to rank j, block i of recv came from
 * rank i. */
STRAIT_C_EXPORT straitResult_t straitAllToAll(const void* sendbuff, void* recvbuff, int64_t count,
                                              straitDataType_t datatype, straitComm_t comm,
                                              straitStream_t stream);
/** Non-blocking straitAllToAll. */
STRAIT_C_EXPORT straitResult_t straitAllToAllAsync(const void* sendbuff, void* recvbuff,
                                                   int64_t count, straitDataType_t datatype,
                                                   straitComm_t comm, straitStream_t stream,
                                                   straitRequest_t* request);
/** As AllToAll with per-pair sizes (packed, rank order): sendcounts[j] elements to rank j,
 * recvcounts[i] from rank i; rank i's sendcounts[j] must equal rank j's recvcounts[i]
 * (straitMismatch otherwise). Host buffers only. */
STRAIT_C_EXPORT straitResult_t straitAllToAllV(const void* sendbuff, const int64_t* sendcounts,
                                               void* recvbuff, const int64_t* recvcounts,
                                               straitDataType_t datatype, straitComm_t comm);
/** Non-blocking straitAllToAllV. */
STRAIT_C_EXPORT straitResult_t straitAllToAllVAsync(const void* sendbuff, const int64_t* sendcounts,
                                                    void* recvbuff, const int64_t* recvcounts,
                                                    straitDataType_t datatype, straitComm_t comm,
                                                    straitRequest_t* request);

/** Returns (or completes) once every rank has entered it. */
STRAIT_C_EXPORT straitResult_t straitBarrier(straitComm_t comm);
/** Non-blocking straitBarrier. */
STRAIT_C_EXPORT straitResult_t straitBarrierAsync(straitComm_t comm, straitRequest_t* request);

/** ---- Point to point ----
 * count elements to / from rank peer. The receive must be for exactly as many bytes as were sent.
 * tag < 2^37 (0 for device buffers, which NCCL matches in order); messages between two ranks with
 * one tag arrive in the order sent. Not ordered with respect to collectives. */
STRAIT_C_EXPORT straitResult_t straitSend(const void* sendbuff, int64_t count,
                                          straitDataType_t datatype, int peer, uint64_t tag,
                                          straitComm_t comm, straitStream_t stream);
/** Non-blocking straitSend. */
STRAIT_C_EXPORT straitResult_t straitSendAsync(const void* sendbuff, int64_t count,
                                               straitDataType_t datatype, int peer, uint64_t tag,
                                               straitComm_t comm, straitStream_t stream,
                                               straitRequest_t* request);
/** Receives count elements from rank peer with tag (see straitSend). */
STRAIT_C_EXPORT straitResult_t straitRecv(void* recvbuff, int64_t count, straitDataType_t datatype,
                                          int peer, uint64_t tag, straitComm_t comm,
                                          straitStream_t stream);
/** Non-blocking straitRecv. */
STRAIT_C_EXPORT straitResult_t straitRecvAsync(void* recvbuff, int64_t count,
                                               straitDataType_t datatype, int peer, uint64_t tag,
                                               straitComm_t comm, straitStream_t stream,
                                               straitRequest_t* request);
/** Non-blocking receive of count elements with tag from whichever rank sends one first
 * (MPI_ANY_SOURCE); straitRequestGetSource then names that rank. Host buffers only (NCCL has no
 * such receive: a device buffer is straitInvalidArgument), and not over encrypted links
 * (STRAIT_ENCRYPT: the request fails saying so). Messages from one sender with one tag still
 * arrive in the order sent. */
STRAIT_C_EXPORT straitResult_t straitRecvAnyAsync(void* recvbuff, int64_t count,
                                                  straitDataType_t datatype, uint64_t tag,
                                                  straitComm_t comm, straitStream_t stream,
                                                  straitRequest_t* request);

#ifdef __cplusplus
}
#endif

#endif /* STRAIT_STRAIT_H_ */
