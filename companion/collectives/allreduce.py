"""All-reduce by hand, over point-to-point messages: naive, ring, recursive doubling.

Used in: chapter 3 (chapters 5 and 6 measure DDP against them).

Each function sums a tensor across all ranks of the default process group,
**in place**, using only point-to-point messages (``send``/``recv``, and
``isend``/``irecv`` posted together by :func:`sendrecv`), and returns
the tensor. Afterwards every rank holds the same values, bit for bit. Call
them inside worker processes (see :func:`companion.runtime.launcher.launch`).

With ``p`` ranks and ``n`` bytes per rank, and a message costing
``alpha + bytes * beta`` (see :mod:`companion.collectives.costmodel`), what must happen
one after another (a send and a receive in the same step overlap):

=====================  ==================  ======================
algorithm              messages in a row   bytes in a row
=====================  ==================  ======================
naive                  ``2 (p - 1)``       ``2 (p - 1) n``
ring                   ``2 (p - 1)``       ``2 (p - 1) / p * n``
recursive doubling     ``log2 p``          ``log2 p * n``
=====================  ==================  ======================
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from ..core.checks import check_int, check_tensor
from ..runtime.agree import check_same_tensor_size
from .trace import note

__all__ = [
    "sendrecv",
    "allreduce_naive",
    "allreduce_ring",
    "allreduce_ring_pipelined",
    "allreduce_recursive_doubling",
    "allreduce_torch",
    "allreduce_mean",
    "chunk_bounds",
    "ALLREDUCES",
    "HAND_WRITTEN",
]


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``tensor`` sharing its memory, so results land in place."""
    check_tensor(tensor, "tensor", "all-reduce sums a tensor in place")
    if dist.get_debug_level() == dist.DebugLevel.DETAIL:  # as torch checks its collectives
        check_same_tensor_size(tensor, "all-reduce")
    if not tensor.is_contiguous():
        raise ValueError(
            "all-reduce works in place on a contiguous tensor; pass "
            "tensor.contiguous() and copy the result back"
        )
    return tensor.view(-1)


def allreduce_naive(tensor: torch.Tensor, trace: list | None = None) -> torch.Tensor:
    """Sum across ranks in place: all send to rank 0, which adds and sends back.

    Rank 0 receives ``p - 1`` messages, then sends ``p - 1``: its link carries
    everything, one message after another, while the other links sit idle.
    With a list as ``trace``, each message is recorded in it
    (:mod:`companion.collectives.trace`; step ``s`` is rank 0's ``s``-th message).
    """
    flat, rank, world = _flat(tensor), dist.get_rank(), dist.get_world_size()
    whole = (0, flat.numel())
    if rank == 0:
        buf = torch.empty_like(flat)
        for src in range(1, world):  # reduce: rank 0 accumulates, in rank order
            dist.recv(buf, src=src)
            flat += buf
            if trace is not None:
                note(trace, src - 1, "reduce", flat, src=src, received=whole)
        for dst in range(1, world):  # broadcast: everyone gets the same sum
            dist.send(flat, dst=dst)
            if trace is not None:
                note(trace, world - 2 + dst, "broadcast", flat, to=dst, sent=whole)
    else:
        dist.send(flat, dst=0)
        if trace is not None:
            note(trace, rank - 1, "reduce", flat, to=0, sent=whole)
        dist.recv(flat, src=0)
        if trace is not None:
            note(trace, world - 2 + rank, "broadcast", flat, src=0, received=whole)
    return tensor


def sendrecv(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int, wait: bool = True) -> list:
    """Send ``send`` to rank ``dst`` while receiving ``recv`` from rank ``src``.

    Both transfers are posted together (``batch_isend_irecv``: an ``isend`` and
    an ``irecv``), then waited for. Posting both before waiting is what makes
    a swap between two ranks safe: with a blocking ``send`` first on both
    sides, each would wait for the other to receive. (With NCCL, a send and a
    receive between the same two ranks only progress together when posted
    as one group, which ``batch_isend_irecv`` does.) Empty tensors are skipped.
    With ``wait=False`` the requests are returned, to be waited for later.
    """
    ops = [dist.P2POp(dist.isend, send, dst)] if send.numel() else []
    if recv.numel():
        ops.append(dist.P2POp(dist.irecv, recv, src))
    requests = dist.batch_isend_irecv(ops) if ops else []
    if not wait:
        return requests
    for req in requests:
        req.wait()
    return []


def _check_chunks(numel: int, world_size: int) -> None:
    check_int(numel, "numel", 0)
    check_int(world_size, "world_size")


def chunk_bounds(numel: int, world_size: int) -> list[tuple[int, int]]:
    """``world_size`` contiguous ``(start, stop)`` ranges covering ``numel`` elements.

    Sizes differ by at most one (the first ``numel % world_size`` chunks are one
    longer); with fewer elements than ranks some chunks are empty.
    """
    _check_chunks(numel, world_size)
    base, extra = divmod(numel, world_size)
    bounds, start = [], 0
    for i in range(world_size):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def allreduce_ring(tensor: torch.Tensor, trace: list | None = None) -> torch.Tensor:
    """Sum across ranks in place with a ring: reduce-scatter, then all-gather.

    The tensor is cut into ``p`` chunks and the ranks form a ring: rank ``r``
    sends to ``r + 1`` and receives from ``r - 1``. In each of ``p - 1``
    *reduce-scatter* steps every rank passes one chunk on and adds the chunk
    it receives into its own copy; afterwards rank ``r`` holds the complete
    sum of chunk ``r + 1``. In ``p - 1`` *all-gather* steps the complete
    chunks travel round the ring, overwriting the partial ones. Every link
    is busy in every step, and each rank sends ``2 (p - 1) / p`` of the
    tensor in all, whatever ``p``. Empty chunks (fewer elements than ranks)
    are skipped by both neighbours. With a list as ``trace``, every step is
    recorded in it (:mod:`companion.collectives.trace`; chapter 3 draws them).
    """
    flat, rank, world = _flat(tensor), dist.get_rank(), dist.get_world_size()
    if world == 1:
        return tensor
    bounds = chunk_bounds(flat.numel(), world)
    chunks = [flat[a:b] for a, b in bounds]
    right, left = (rank + 1) % world, (rank - 1) % world
    buf = torch.empty_like(chunks[0])  # chunk 0 is the longest
    for step in range(world - 1):  # reduce-scatter
        send_idx, recv_idx = (rank - step) % world, (rank - step - 1) % world
        incoming = buf[: chunks[recv_idx].numel()]
        sendrecv(chunks[send_idx], right, incoming, left)
        chunks[recv_idx] += incoming
        if trace is not None:
            i, j = bounds[send_idx], bounds[recv_idx]
            note(trace, step, "reduce-scatter", flat, right, i, left, j)
    for step in range(world - 1):  # all-gather: complete chunks replace partial ones
        send_idx, recv_idx = (rank + 1 - step) % world, (rank - step) % world
        sendrecv(chunks[send_idx], right, chunks[recv_idx], left)
        if trace is not None:
            i, j = bounds[send_idx], bounds[recv_idx]
            note(trace, world - 1 + step, "all-gather", flat, right, i, left, j)
    return tensor


def allreduce_ring_pipelined(tensor: torch.Tensor, segment: int = 2**20) -> torch.Tensor:
    """The ring, with each reduce-scatter step cut into ``segment``-element pieces.

    :func:`allreduce_ring` receives a whole chunk into a buffer as large as the
    chunk, then adds it: on a CPU, every received byte travels to main memory
    and back before it is added, and the adding waits for the whole chunk.
    Here the chunk arrives one segment at a time, in turn into two buffers
    small enough to stay in the CPU's cache; segment ``i + 1`` is in flight
    while segment ``i`` is being added. Same result, bit for bit, as the ring.
    The default, ``2**20`` elements: fastest of ``2**12``..``2**22`` in 3 of 4
    runs at 64 MB on two processes of a 2-core CPU (``2**18`` in the fourth);
    chapter 3 prints the sweep (``companion_tools.bench.allreduce.segment_sweep``).
    """
    check_int(segment, "segment", 1, "give a segment length in elements, e.g. 2**20")
    flat, rank, world = _flat(tensor), dist.get_rank(), dist.get_world_size()
    if world == 1:
        return tensor
    chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), world)]
    right, left = (rank + 1) % world, (rank - 1) % world
    bufs = [torch.empty_like(chunks[0][:segment]) for _ in range(2)]
    for step in range(world - 1):  # reduce-scatter, segment by segment
        send = chunks[(rank - step) % world]
        into = chunks[(rank - step - 1) % world]  # lengths may differ by one
        pending = None  # the previous segment: (requests, where it goes, buffer)
        for i, start in enumerate(range(0, max(len(send), len(into)), segment)):
            part = into[start : start + segment]
            buf = bufs[i % 2][: len(part)]
            out = send[start : start + segment]
            requests = sendrecv(out, right, buf, left, wait=False)
            if pending is not None:
                _add_when_received(*pending)  # while this segment is in flight
            pending = (requests, part, buf)
        if pending is not None:
            _add_when_received(*pending)
    for step in range(world - 1):  # all-gather: as in the ring
        send_idx, recv_idx = (rank + 1 - step) % world, (rank - step) % world
        sendrecv(chunks[send_idx], right, chunks[recv_idx], left)
    return tensor


def _add_when_received(requests: list, part: torch.Tensor, buf: torch.Tensor) -> None:
    for req in requests:
        req.wait()
    part += buf


def allreduce_recursive_doubling(tensor: torch.Tensor, trace: list | None = None) -> torch.Tensor:
    """Sum across ranks in place by recursive doubling: ``log2 p`` pairwise swaps.

    In step ``k`` each rank swaps its whole tensor with the rank whose number
    differs in bit ``k`` and adds what it receives: after step ``k`` every rank
    holds the sum over a group of ``2**(k+1)`` ranks. Few steps (good for
    small messages, where latency dominates) but the whole tensor every step
    (poor for large ones).

    Any world size works: when ``p`` is not a power of two, the ``p - q``
    ranks above the largest power of two ``q`` first hand their tensor to a
    partner below ``q`` and receive the result at the end, two extra steps.
    With a list as ``trace``, every step is recorded in it
    (:mod:`companion.collectives.trace`).
    """
    flat, rank, world = _flat(tensor), dist.get_rank(), dist.get_world_size()
    q = 1 << (world.bit_length() - 1)  # largest power of two <= world
    buf, whole, extra = torch.empty_like(flat), (0, flat.numel()), int(world > q)
    if rank >= q:  # fold in: the extra ranks hand over their tensor ...
        dist.send(flat, dst=rank - q)
        if trace is not None:
            note(trace, 0, "fold in", flat, to=rank - q, sent=whole)
    elif rank + q < world:
        dist.recv(buf, src=rank + q)
        flat += buf
        if trace is not None:
            note(trace, 0, "fold in", flat, src=rank + q, received=whole)
    if rank < q:
        mask = 1
        while mask < q:
            partner = rank ^ mask
            sendrecv(flat, partner, buf, partner)  # a swap
            flat += buf  # a + b == b + a: both partners hold the same bits
            if trace is not None:
                step = extra + mask.bit_length() - 1
                note(trace, step, "swap", flat, partner, whole, partner, whole)
            mask <<= 1
    last = extra + q.bit_length() - 1  # the step number of the fold out
    if rank >= q:  # ... and get the sum back
        dist.recv(flat, src=rank - q)
        if trace is not None:
            note(trace, last, "fold out", flat, src=rank - q, received=whole)
    elif rank + q < world:
        dist.send(flat, dst=rank + q)
        if trace is not None:
            note(trace, last, "fold out", flat, to=rank + q, sent=whole)
    return tensor


def allreduce_torch(tensor: torch.Tensor) -> torch.Tensor:
    """``torch.distributed.all_reduce`` (SUM), with the hand-written ones' signature."""
    dist.all_reduce(tensor)
    return tensor


ALLREDUCES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "naive": allreduce_naive,
    "ring": allreduce_ring,
    "pipelined ring": allreduce_ring_pipelined,
    "recursive doubling": allreduce_recursive_doubling,
    "dist.all_reduce": allreduce_torch,
}
HAND_WRITTEN = [name for name in ALLREDUCES if name != "dist.all_reduce"]


def allreduce_mean(tensor: torch.Tensor, allreduce: Callable = allreduce_ring) -> torch.Tensor:
    """Average across ranks in place: the sum by ``allreduce`` over the world size."""
    _check_callable(allreduce, tensor)
    allreduce(tensor)
    tensor /= dist.get_world_size()
    return tensor


def _check_callable(allreduce, tensor=None) -> None:
    if not callable(allreduce):
        raise TypeError(f"allreduce must be a function such as allreduce_ring, got {allreduce!r}")
    if torch.is_tensor(tensor) and not tensor.is_floating_point():  # before the sum is written
        raise TypeError(
            f"an average needs a floating-point tensor, got {tensor.dtype}: pass "
            f"tensor.float() (or all-reduce the sum and divide it yourself)"
        )
