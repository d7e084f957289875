// UcxTransport's record of one posted UCX request (private to comm/transport/ucx/): shared by the
// files that post requests (ucx_messages.cpp), complete them (ucx_transport.cpp's retire) and
// read announced messages (ucx_single_copy.cpp).
#pragma once

#include <cstddef>
#include <optional>

#include "comm/transport/ucx/ucx_transport.h"

namespace strait::comm {

struct UcxTransport::InFlight {
  UcxTransport* transport = nullptr;
  RequestPtr request;
  void* ucx_request = nullptr;  // null until the post call returns a handle
  bool is_send = false;
  int peer = 0;  // world rank
  // Receives: where the message lands, so that an announcement (single copy) can be read there.
  std::byte* recv_buf = nullptr;
  std::size_t recv_len = 0;
  Tag tag = 0;
  // Posted to match an announcement too (a collective tag): a point-to-point tag may have the
  // announcement's bit as one of its own.
  bool takes_announcement = false;
  // irecv_reduce(): an announced message is reduced as it is read (see read_piece()).
  std::optional<ReduceOnArrival> reduce;
};

}  // namespace strait::comm
