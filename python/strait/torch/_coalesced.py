"""The coalesced collectives of ProcessGroupStrait: several tensors in one strait operation.

- ``allgather_coalesced(output_lists, input_list)`` (dist.all_gather_coalesced): any dtypes,
  moved as bytes in one allgather; ``output_lists[r][i]`` gets rank r's ``input_list[i]``.
- ``allgather_into_tensor_coalesced(outputs, inputs)``: ``outputs[i]`` (``size`` times
  ``inputs[i]``'s elements) gets every rank's ``inputs[i]`` in rank order; one allgather.
- ``reduce_scatter_tensor_coalesced(outputs, inputs, opts)``: ``inputs[i]`` holds ``size``
  times ``outputs[i]``'s elements; ``outputs[i]`` gets the reduction of every rank's r-th part
  (r = this rank); one reduce-scatter. All tensors of one dtype (it reduces).

Every rank passes tensors of the same shapes and dtypes in the same order (as torch requires);
host tensors only (the staging buffers are host memory). Each returns the group's Work for the
one operation; outputs are written when it completes.
"""

import torch

from .. import _capi as C


def _host(pg, tensors, name):
    for t in tensors:
        pg._check(t, name)
        if not t.is_cpu:
            raise ValueError(f"strait: {name}: host (cpu) tensors only, got one on {t.device}; "
                             "call the per-tensor collective for CUDA tensors")


def _bytes(t):
    """A flat uint8 view of a contiguous tensor (its memory, not a copy)."""
    return t.reshape(-1).view(torch.uint8)


def _gather(pg, inputs, name, keep, result, post):
    """One allgather of the inputs' bytes (concatenated); post(buffer, chunk) copies out."""
    inbuf = torch.cat([_bytes(t) for t in inputs]) if inputs else torch.empty(0, dtype=torch.uint8)
    k = inbuf.numel()
    outbuf = torch.empty(k * pg._size, dtype=torch.uint8)
    return pg._submit(C.straitAllGatherAsync,
                      (inbuf.data_ptr(), outbuf.data_ptr(), k, C.UINT8, pg._comm, None),
                      (keep, inbuf, outbuf), result, name, lambda: post(outbuf, k))


def allgather_coalesced(pg, output_lists, input_list, opts=None):
    name = "all_gather_coalesced"
    if len(output_lists) != pg._size:
        raise ValueError(f"strait: {name}: {len(output_lists)} output lists; it needs one per "
                         f"rank ({pg._size})")
    _host(pg, input_list, name)
    for r, outs in enumerate(output_lists):
        if len(outs) != len(input_list):
            raise ValueError(f"strait: {name}: output list {r} has {len(outs)} tensors, the "
                             f"input list {len(input_list)}; they must match")
        for o, i in zip(outs, input_list):
            if o.numel() != i.numel() or o.dtype != i.dtype:
                raise ValueError(f"strait: {name}: an output ({o.dtype}, {o.numel()} elements) "
                                 f"does not match its input ({i.dtype}, {i.numel()})")
        _host(pg, outs, name)

    def post(buf, k):
        for r, outs in enumerate(output_lists):
            offset = r * k
            for o in outs:
                n = o.numel() * o.element_size()
                _bytes(o).copy_(buf[offset:offset + n])
                offset += n

    return _gather(pg, input_list, name, (output_lists, input_list), output_lists, post)


def allgather_into_tensor_coalesced(pg, outputs, inputs, opts=None):
    name = "allgather_into_tensor_coalesced"
    if len(outputs) != len(inputs):
        raise ValueError(f"strait: {name}: {len(outputs)} outputs and {len(inputs)} inputs; "
                         "it needs one output per input")
    _host(pg, inputs, name)
    _host(pg, outputs, name)
    for o, i in zip(outputs, inputs):
        if o.dtype != i.dtype or o.numel() != i.numel() * pg._size:
            raise ValueError(f"strait: {name}: an output ({o.dtype}, {o.numel()} elements) "
                             f"needs its input's dtype ({i.dtype}) and {pg._size} times its "
                             f"{i.numel()} elements")

    def post(buf, k):
        offset = 0
        for o, i in zip(outputs, inputs):
            n = i.numel() * i.element_size()
            ob = _bytes(o)
            for r in range(pg._size):
                ob[r * n:(r + 1) * n].copy_(buf[r * k + offset:r * k + offset + n])
            offset += n

    return _gather(pg, inputs, name, (outputs, inputs), outputs, post)


def reduce_scatter_tensor_coalesced(pg, outputs, inputs, opts=None):
    name = "reduce_scatter_tensor_coalesced"
    if len(outputs) != len(inputs) or not outputs:
        raise ValueError(f"strait: {name}: {len(outputs)} outputs and {len(inputs)} inputs; "
                         "it needs one output per input, at least one")
    _host(pg, inputs, name)
    _host(pg, outputs, name)
    first = outputs[0]
    pg._same(outputs + inputs, first, name)
    for o, i in zip(outputs, inputs):
        if i.numel() != o.numel() * pg._size:
            raise ValueError(f"strait: {name}: an input has {i.numel()} elements; it needs its "
                             f"output's {o.numel()} times {pg._size} ranks")
    op = pg._op(opts, first, name)
    dt = pg._rdtype(first, name)
    P = pg._size
    # Row r of [P, sum of output sizes] is what rank r receives reduced.
    flat = torch.cat([i.reshape(P, -1) for i in inputs], dim=1).reshape(-1)
    total = sum(o.numel() for o in outputs)
    out = torch.empty(total, dtype=first.dtype)

    def post():
        offset = 0
        for o in outputs:
            o.copy_(out[offset:offset + o.numel()].view_as(o))
            offset += o.numel()

    return pg._submit(C.straitReduceScatterAsync,
                      (flat.data_ptr(), out.data_ptr(), total, dt, op, pg._comm, None),
                      (outputs, inputs, flat, out), outputs, name, post)
