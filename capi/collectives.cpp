// The C API's operations (capi/strait.h): each entry point converts its C arguments into one
// operation record (comm/collective_args.h) and hands it to post(), the single path that looks the
// communicator up and runs the record through Communicator::run() (blocking forms) or post()
// (Async forms, which hand out a request).
#include <fmt/format.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capi/arguments.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "capi/strait.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/cuda_stream.h"

namespace strait::capi {

namespace {

using comm::Communicator;
using comm::Work;
using kernels::DType;

enum class Form : std::uint8_t { Blocking, Async };

// The one path of every operation. `build(communicator, go)` converts and checks the operation's
// own arguments and hands its record to `go`, which runs it on the communicator's own paths: the
// blocking forms through Communicator::run() (as the C++ blocking calls: the caller drives the
// operation, and a short allreduce of ranks on one host takes the mailbox), the Async forms
// through post(), whose Work becomes the request. The stream travels in the record, so
// concurrent calls cannot swap each other's streams.
template <class Build>
straitResult_t post(const char* function, Form form, straitComm_t comm_handle,
                    straitStream_t stream, straitRequest_t* request, Build&& build) noexcept {
  return guard(function, [&](std::shared_ptr<CommHandle>& handle) {
    handle = Registry::instance().comm(comm_handle, function);
    if (form == Form::Async) {
      require_out(request, function, "request");
      *request = nullptr;
    }
    Communicator& comm = handle->comm();
    build(std::as_const(comm), [&](comm::CollectiveArgs args) {
      args.stream = static_cast<kernels::CudaStream>(stream);
      if (form == Form::Blocking) {
        comm.run(args);
      } else {
        *request = Registry::instance().add(
            std::make_shared<RequestHandle>(comm.post(args), handle, args.source));
      }
    });
    return straitSuccess;
  });
}

// The count of a collective's buffers, in elements of its dtype.
std::size_t count_of(std::int64_t count, DType dtype, const char* function,
                     const char* argument = "count") {
  return to_count(count, dtype, function, argument);
}

void check_root(int root, const Communicator& c, const char* function, const char* what = "root") {
  if (root < 0 || root >= c.size()) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: {} is {}; it must be a rank of the communicator, 0 .. {}",
                            function, what, root, c.size() - 1));
  }
}

// The C++ Compression of a straitCompression_t.
comm::Compression compression_of(const straitCompression_t* compression, const char* function) {
  const straitCompression_t defaults = STRAIT_COMPRESSION_INITIALIZER;
  const straitCompression_t in =
      read_versioned(compression, StructInfo::compression(), function, defaults);
  if (in.codec == nullptr) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: compression->codec is NULL; name a codec spec such as \"int8\", "
                            "\"topk:fraction=0.01\" or \"powersgd:rank=4\"",
                            function));
  }
  if (in.matrixCount < 0 || (in.matrixCount > 0 && in.matrices == nullptr)) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("{}: compression->matrixCount is {} with matrices {}: give that many "
                            "matrices, or 0 and NULL",
                            function, in.matrixCount, in.matrices == nullptr ? "NULL" : "set"));
  }
  comm::Compression out{.codec = in.codec, .key = in.key == nullptr ? "" : in.key};
  out.matrices.reserve(static_cast<std::size_t>(in.matrixCount));
  for (std::int64_t i = 0; i < in.matrixCount; ++i) {
    const straitMatrixShape_t& m = in.matrices[i];
    if (m.offset < 0 || m.rows < 0 || m.cols < 0) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("{}: compression->matrices[{}] is offset {}, {} x {}: none may be "
                              "negative",
                              function, i, m.offset, m.rows, m.cols));
    }
    out.matrices.push_back({.offset = static_cast<std::size_t>(m.offset),
                            .rows = static_cast<std::size_t>(m.rows),
                            .cols = static_cast<std::size_t>(m.cols)});
  }
  return out;
}

}  // namespace

}  // namespace strait::capi

using strait::capi::check_root;
using strait::capi::count_of;
using strait::capi::Form;
using strait::capi::post;
using strait::capi::require_host;
using strait::capi::to_counts;
using strait::capi::to_dtype;
using strait::capi::to_op;
using strait::comm::CollectiveArgs;
using strait::comm::Communicator;

namespace {

// Each operation once, for both forms: the blocking entry point passes Form::Blocking and a null
// request, the Async one Form::Async and its request.

straitResult_t all_reduce(const char* f, Form form, const void* send, void* recv, int64_t count,
                          straitDataType_t datatype, straitRedOp_t op, straitComm_t comm,
                          straitStream_t stream, straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator&, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    go(CollectiveArgs::allreduce(send, recv, count_of(count, dtype, f), dtype, to_op(op, f)));
  });
}

straitResult_t all_reduce_compressed(const char* f, Form form, const void* send, void* recv,
                                     int64_t count, straitDataType_t datatype, straitRedOp_t op,
                                     const straitCompression_t* compression, straitComm_t comm,
                                     straitRequest_t* request) {
  return post(f, form, comm, nullptr, request, [&](const Communicator&, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    if (dtype != strait::kernels::DType::F32) {
      throw strait::Error(strait::ErrorCode::InvalidArgument,
                          fmt::format("{}: datatype is {}; compressed allreduces take "
                                      "straitFloat32 only (they reduce in fp32)",
                                      f, strait::kernels::dtype_name(dtype)));
    }
    const std::size_t n = count_of(count, dtype, f);
    const auto options = strait::capi::compression_of(compression, f);
    require_host(std::array<const void*, 2>{send, recv}, f);
    go(CollectiveArgs::allreduce_compressed(static_cast<const float*>(send),
                                            static_cast<float*>(recv), n, to_op(op, f), options));
  });
}

straitResult_t broadcast(const char* f, Form form, void* buff, int64_t count,
                         straitDataType_t datatype, int root, straitComm_t comm,
                         straitStream_t stream, straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator& c, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    check_root(root, c, f);
    go(CollectiveArgs::broadcast(buff, count_of(count, dtype, f), dtype, root));
  });
}

straitResult_t reduce(const char* f, Form form, const void* send, void* recv, int64_t count,
                      straitDataType_t datatype, straitRedOp_t op, int root, straitComm_t comm,
                      straitStream_t stream, straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator& c, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    check_root(root, c, f);
    go(CollectiveArgs::reduce(send, recv, count_of(count, dtype, f), dtype, to_op(op, f), root));
  });
}

straitResult_t all_gather(const char* f, Form form, const void* send, void* recv, int64_t sendcount,
                          straitDataType_t datatype, straitComm_t comm, straitStream_t stream,
                          straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator&, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    go(CollectiveArgs::allgather(send, recv, count_of(sendcount, dtype, f, "sendcount"), dtype));
  });
}

straitResult_t all_gather_v(const char* f, Form form, const void* send, void* recv,
                            const int64_t* recvcounts, straitDataType_t datatype, straitComm_t comm,
                            straitRequest_t* request) {
  return post(f, form, comm, nullptr, request, [&](const Communicator& c, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    const auto counts = to_counts(recvcounts, c.size(), dtype, f, "recvcounts");
    require_host(std::array<const void*, 2>{send, recv}, f);
    go(CollectiveArgs::allgather_v(send, recv, counts, dtype));
  });
}

straitResult_t reduce_scatter(const char* f, Form form, const void* send, void* recv,
                              int64_t recvcount, straitDataType_t datatype, straitRedOp_t op,
                              straitComm_t comm, straitStream_t stream, straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator&, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    go(CollectiveArgs::reduce_scatter(send, recv, count_of(recvcount, dtype, f, "recvcount"), dtype,
                                      to_op(op, f)));
  });
}

straitResult_t reduce_scatter_v(const char* f, Form form, const void* send, void* recv,
                                const int64_t* recvcounts, straitDataType_t datatype,
                                straitRedOp_t op, straitComm_t comm, straitRequest_t* request) {
  return post(f, form, comm, nullptr, request, [&](const Communicator& c, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    const auto counts = to_counts(recvcounts, c.size(), dtype, f, "recvcounts");
    const auto reduce_op = to_op(op, f);
    require_host(std::array<const void*, 2>{send, recv}, f);
    go(CollectiveArgs::reduce_scatter_v(send, recv, counts, dtype, reduce_op));
  });
}

straitResult_t gather(const char* f, Form form, const void* send, void* recv, int64_t sendcount,
                      straitDataType_t datatype, int root, straitComm_t comm, straitStream_t stream,
                      straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator& c, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    check_root(root, c, f);
    go(CollectiveArgs::gather(send, recv, count_of(sendcount, dtype, f, "sendcount"), dtype, root));
  });
}

straitResult_t scatter(const char* f, Form form, const void* send, void* recv, int64_t recvcount,
                       straitDataType_t datatype, int root, straitComm_t comm,
                       straitStream_t stream, straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator& c, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    check_root(root, c, f);
    go(CollectiveArgs::scatter(send, recv, count_of(recvcount, dtype, f, "recvcount"), dtype,
                               root));
  });
}

straitResult_t all_to_all(const char* f, Form form, const void* send, void* recv, int64_t count,
                          straitDataType_t datatype, straitComm_t comm, straitStream_t stream,
                          straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator&, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    go(CollectiveArgs::alltoall(send, recv, count_of(count, dtype, f), dtype));
  });
}

straitResult_t all_to_all_v(const char* f, Form form, const void* send, const int64_t* sendcounts,
                            void* recv, const int64_t* recvcounts, straitDataType_t datatype,
                            straitComm_t comm, straitRequest_t* request) {
  return post(f, form, comm, nullptr, request, [&](const Communicator& c, const auto& go) {
    const auto dtype = to_dtype(datatype, f);
    const auto send_counts = to_counts(sendcounts, c.size(), dtype, f, "sendcounts");
    const auto recv_counts = to_counts(recvcounts, c.size(), dtype, f, "recvcounts");
    require_host(std::array<const void*, 2>{send, recv}, f);
    go(CollectiveArgs::alltoall_v(send, send_counts, recv, recv_counts, dtype));
  });
}

straitResult_t barrier(const char* f, Form form, straitComm_t comm, straitRequest_t* request) {
  return post(f, form, comm, nullptr, request,
              [&](const Communicator&, const auto& go) { go(CollectiveArgs::barrier()); });
}

// Point to point: the C++ API counts bytes.
std::size_t bytes_of(int64_t count, straitDataType_t datatype, const char* f) {
  const auto dtype = to_dtype(datatype, f);
  return count_of(count, dtype, f) * strait::kernels::dtype_size(dtype);
}

straitResult_t point_send(const char* f, Form form, const void* buff, int64_t count,
                          straitDataType_t datatype, int peer, uint64_t tag, straitComm_t comm,
                          straitStream_t stream, straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator& c, const auto& go) {
    const std::size_t bytes = bytes_of(count, datatype, f);
    check_root(peer, c, f, "peer");
    go(CollectiveArgs::send_to(buff, bytes, peer, tag));
  });
}

straitResult_t point_recv(const char* f, Form form, void* buff, int64_t count,
                          straitDataType_t datatype, int peer, uint64_t tag, straitComm_t comm,
                          straitStream_t stream, straitRequest_t* request) {
  return post(f, form, comm, stream, request, [&](const Communicator& c, const auto& go) {
    const std::size_t bytes = bytes_of(count, datatype, f);
    check_root(peer, c, f, "peer");
    go(CollectiveArgs::recv_from(buff, bytes, peer, tag));
  });
}

}  // namespace

extern "C" {

straitResult_t straitAllReduce(const void* sendbuff, void* recvbuff, int64_t count,
                               straitDataType_t datatype, straitRedOp_t op, straitComm_t comm,
                               straitStream_t stream) {
  return all_reduce("straitAllReduce", Form::Blocking, sendbuff, recvbuff, count, datatype, op,
                    comm, stream, nullptr);
}
straitResult_t straitAllReduceAsync(const void* sendbuff, void* recvbuff, int64_t count,
                                    straitDataType_t datatype, straitRedOp_t op, straitComm_t comm,
                                    straitStream_t stream, straitRequest_t* request) {
  return all_reduce("straitAllReduceAsync", Form::Async, sendbuff, recvbuff, count, datatype, op,
                    comm, stream, request);
}

straitResult_t straitAllReduceCompressed(const void* sendbuff, void* recvbuff, int64_t count,
                                         straitDataType_t datatype, straitRedOp_t op,
                                         const straitCompression_t* compression,
                                         straitComm_t comm) {
  return all_reduce_compressed("straitAllReduceCompressed", Form::Blocking, sendbuff, recvbuff,
                               count, datatype, op, compression, comm, nullptr);
}
straitResult_t straitAllReduceCompressedAsync(const void* sendbuff, void* recvbuff, int64_t count,
                                              straitDataType_t datatype, straitRedOp_t op,
                                              const straitCompression_t* compression,
                                              straitComm_t comm, straitRequest_t* request) {
  return all_reduce_compressed("straitAllReduceCompressedAsync", Form::Async, sendbuff, recvbuff,
                               count, datatype, op, compression, comm, request);
}

straitResult_t straitBroadcast(void* buff, int64_t count, straitDataType_t datatype, int root,
                               straitComm_t comm, straitStream_t stream) {
  return broadcast("straitBroadcast", Form::Blocking, buff, count, datatype, root, comm, stream,
                   nullptr);
}
straitResult_t straitBroadcastAsync(void* buff, int64_t count, straitDataType_t datatype, int root,
                                    straitComm_t comm, straitStream_t stream,
                                    straitRequest_t* request) {
  return broadcast("straitBroadcastAsync", Form::Async, buff, count, datatype, root, comm, stream,
                   request);
}

straitResult_t straitReduce(const void* sendbuff, void* recvbuff, int64_t count,
                            straitDataType_t datatype, straitRedOp_t op, int root,
                            straitComm_t comm, straitStream_t stream) {
  return reduce("straitReduce", Form::Blocking, sendbuff, recvbuff, count, datatype, op, root, comm,
                stream, nullptr);
}
straitResult_t straitReduceAsync(const void* sendbuff, void* recvbuff, int64_t count,
                                 straitDataType_t datatype, straitRedOp_t op, int root,
                                 straitComm_t comm, straitStream_t stream,
                                 straitRequest_t* request) {
  return reduce("straitReduceAsync", Form::Async, sendbuff, recvbuff, count, datatype, op, root,
                comm, stream, request);
}

straitResult_t straitAllGather(const void* sendbuff, void* recvbuff, int64_t sendcount,
                               straitDataType_t datatype, straitComm_t comm,
                               straitStream_t stream) {
  return all_gather("straitAllGather", Form::Blocking, sendbuff, recvbuff, sendcount, datatype,
                    comm, stream, nullptr);
}
straitResult_t straitAllGatherAsync(const void* sendbuff, void* recvbuff, int64_t sendcount,
                                    straitDataType_t datatype, straitComm_t comm,
                                    straitStream_t stream, straitRequest_t* request) {
  return all_gather("straitAllGatherAsync", Form::Async, sendbuff, recvbuff, sendcount, datatype,
                    comm, stream, request);
}

straitResult_t straitAllGatherV(const void* sendbuff, void* recvbuff, const int64_t* recvcounts,
                                straitDataType_t datatype, straitComm_t comm) {
  return all_gather_v("straitAllGatherV", Form::Blocking, sendbuff, recvbuff, recvcounts, datatype,
                      comm, nullptr);
}
straitResult_t straitAllGatherVAsync(const void* sendbuff, void* recvbuff,
                                     const int64_t* recvcounts, straitDataType_t datatype,
                                     straitComm_t comm, straitRequest_t* request) {
  return all_gather_v("straitAllGatherVAsync", Form::Async, sendbuff, recvbuff, recvcounts,
                      datatype, comm, request);
}

straitResult_t straitReduceScatter(const void* sendbuff, void* recvbuff, int64_t recvcount,
                                   straitDataType_t datatype, straitRedOp_t op, straitComm_t comm,
                                   straitStream_t stream) {
  return reduce_scatter("straitReduceScatter", Form::Blocking, sendbuff, recvbuff, recvcount,
                        datatype, op, comm, stream, nullptr);
}
straitResult_t straitReduceScatterAsync(const void* sendbuff, void* recvbuff, int64_t recvcount,
                                        straitDataType_t datatype, straitRedOp_t op,
                                        straitComm_t comm, straitStream_t stream,
                                        straitRequest_t* request) {
  return reduce_scatter("straitReduceScatterAsync", Form::Async, sendbuff, recvbuff, recvcount,
                        datatype, op, comm, stream, request);
}

straitResult_t straitReduceScatterV(const void* sendbuff, void* recvbuff, const int64_t* recvcounts,
                                    straitDataType_t datatype, straitRedOp_t op,
                                    straitComm_t comm) {
  return reduce_scatter_v("straitReduceScatterV", Form::Blocking, sendbuff, recvbuff, recvcounts,
                          datatype, op, comm, nullptr);
}
straitResult_t straitReduceScatterVAsync(const void* sendbuff, void* recvbuff,
                                         const int64_t* recvcounts, straitDataType_t datatype,
                                         straitRedOp_t op, straitComm_t comm,
                                         straitRequest_t* request) {
  return reduce_scatter_v("straitReduceScatterVAsync", Form::Async, sendbuff, recvbuff, recvcounts,
                          datatype, op, comm, request);
}

straitResult_t straitGather(const void* sendbuff, void* recvbuff, int64_t sendcount,
                            straitDataType_t datatype, int root, straitComm_t comm,
                            straitStream_t stream) {
  return gather("straitGather", Form::Blocking, sendbuff, recvbuff, sendcount, datatype, root, comm,
                stream, nullptr);
}
straitResult_t straitGatherAsync(const void* sendbuff, void* recvbuff, int64_t sendcount,
                                 straitDataType_t datatype, int root, straitComm_t comm,
                                 straitStream_t stream, straitRequest_t* request) {
  return gather("straitGatherAsync", Form::Async, sendbuff, recvbuff, sendcount, datatype, root,
                comm, stream, request);
}

straitResult_t straitScatter(const void* sendbuff, void* recvbuff, int64_t recvcount,
                             straitDataType_t datatype, int root, straitComm_t comm,
                             straitStream_t stream) {
  return scatter("straitScatter", Form::Blocking, sendbuff, recvbuff, recvcount, datatype, root,
                 comm, stream, nullptr);
}
straitResult_t straitScatterAsync(const void* sendbuff, void* recvbuff, int64_t recvcount,
                                  straitDataType_t datatype, int root, straitComm_t comm,
                                  straitStream_t stream, straitRequest_t* request) {
  return scatter("straitScatterAsync", Form::Async, sendbuff, recvbuff, recvcount, datatype, root,
                 comm, stream, request);
}

straitResult_t straitAllToAll(const void* sendbuff, void* recvbuff, int64_t count,
                              straitDataType_t datatype, straitComm_t comm, straitStream_t stream) {
  return all_to_all("straitAllToAll", Form::Blocking, sendbuff, recvbuff, count, datatype, comm,
                    stream, nullptr);
}
straitResult_t straitAllToAllAsync(const void* sendbuff, void* recvbuff, int64_t count,
                                   straitDataType_t datatype, straitComm_t comm,
                                   straitStream_t stream, straitRequest_t* request) {
  return all_to_all("straitAllToAllAsync", Form::Async, sendbuff, recvbuff, count, datatype, comm,
                    stream, request);
}

straitResult_t straitAllToAllV(const void* sendbuff, const int64_t* sendcounts, void* recvbuff,
                               const int64_t* recvcounts, straitDataType_t datatype,
                               straitComm_t comm) {
  return all_to_all_v("straitAllToAllV", Form::Blocking, sendbuff, sendcounts, recvbuff, recvcounts,
                      datatype, comm, nullptr);
}
straitResult_t straitAllToAllVAsync(const void* sendbuff, const int64_t* sendcounts, void* recvbuff,
                                    const int64_t* recvcounts, straitDataType_t datatype,
                                    straitComm_t comm, straitRequest_t* request) {
  return all_to_all_v("straitAllToAllVAsync", Form::Async, sendbuff, sendcounts, recvbuff,
                      recvcounts, datatype, comm, request);
}

straitResult_t straitBarrier(straitComm_t comm) {
  return barrier("straitBarrier", Form::Blocking, comm, nullptr);
}
straitResult_t straitBarrierAsync(straitComm_t comm, straitRequest_t* request) {
  return barrier("straitBarrierAsync", Form::Async, comm, request);
}

straitResult_t straitSend(const void* sendbuff, int64_t count, straitDataType_t datatype, int peer,
                          uint64_t tag, straitComm_t comm, straitStream_t stream) {
  return point_send("straitSend", Form::Blocking, sendbuff, count, datatype, peer, tag, comm,
                    stream, nullptr);
}
straitResult_t straitSendAsync(const void* sendbuff, int64_t count, straitDataType_t datatype,
                               int peer, uint64_t tag, straitComm_t comm, straitStream_t stream,
                               straitRequest_t* request) {
  return point_send("straitSendAsync", Form::Async, sendbuff, count, datatype, peer, tag, comm,
                    stream, request);
}

straitResult_t straitRecv(void* recvbuff, int64_t count, straitDataType_t datatype, int peer,
                          uint64_t tag, straitComm_t comm, straitStream_t stream) {
  return point_recv("straitRecv", Form::Blocking, recvbuff, count, datatype, peer, tag, comm,
                    stream, nullptr);
}
straitResult_t straitRecvAsync(void* recvbuff, int64_t count, straitDataType_t datatype, int peer,
                               uint64_t tag, straitComm_t comm, straitStream_t stream,
                               straitRequest_t* request) {
  return point_recv("straitRecvAsync", Form::Async, recvbuff, count, datatype, peer, tag, comm,
                    stream, request);
}

straitResult_t straitRecvAnyAsync(void* recvbuff, int64_t count, straitDataType_t datatype,
                                  uint64_t tag, straitComm_t comm, straitStream_t stream,
                                  straitRequest_t* request) {
  constexpr const char* kFunction = "straitRecvAnyAsync";
  return post(kFunction, Form::Async, comm, stream, request,
              [&](const Communicator& /*c*/, const auto& go) {
                const std::size_t bytes = bytes_of(count, datatype, kFunction);
                go(CollectiveArgs::recv_from_any(recvbuff, bytes, tag, std::make_shared<int>(-1)));
              });
}

}  // extern "C"
