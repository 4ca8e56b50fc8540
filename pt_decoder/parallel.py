"""Parallel instruction-flow decode: split a stream at PSBs, decode the pieces
on several cores, stitch them into the serial result.

Layer: pt_decoder, above insn.pyx (one InsnDecoder per piece) and below the
tools. Knows PSB boundaries and how pieces join; nothing of files or DAP.

Why it is exact: every PSB+ re-states what a decoder needs (IP, mode, TSX
state, TSC, CBR; SDM 33.3.7 / 33.4.2.7), and the processor does not compress
returns across a PSB, so a decoder synchronised at a PSB continues exactly as
the serial decoder does from the same point. Piece i decodes from its PSB and
stops where the serial decoder meets piece i+1's PSB (the first status update
bound to that PSB+'s IP: before it lie the instructions leading up to the IP
the PSB+ states); piece i+1 starts with a fresh sync there. Stitching drops
the status updates both pieces saw, clears the RESUMED flag a fresh sync puts
on the first instruction, and offsets the cumulative cycle count.

Time: the CYC-to-TSC calibration (libipt's pt_time_cal) carries across PSBs
in a serial decode, so each piece first replays the timing packets of the two
PSB periods before its start (no instructions), which reproduces it: the TSC
of every instruction equals the serial decode's.

Pieces run on processes (`mode="process"`, fork: the image is inherited, not
pickled) or on threads (`mode="thread"`: InsnDecoder releases the GIL in its
loop). decode_parallel() returns the whole flow; decode_parallel_pieces()
yields it piece by piece, in order, with a bounded number of pieces in
flight, for a reader that prints and forgets (`ptdebug decode --parallel`).
"""
from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from pt_decoder.flow_result import FlowResult
from pt_decoder.insn import add_to_column
from pt_decoder.insn_flags import RESUMED

PSB = b"\x02\x82" * 8

_JOB: dict = {}


def psb_offsets(data) -> list[int]:
    """Offsets of every PSB in `data` (a PSB is 16 bytes 02 82 ..., SDM 33.4.2.17)."""
    view = _searchable(data)
    out, pos = [], view.find(PSB)
    while pos >= 0:
        out.append(pos)
        pos = view.find(PSB, pos + len(PSB))
    return out


def split_points(data, pieces: int, min_bytes: int = 64 * 1024) -> list[int]:
    """About `pieces` PSB offsets that cut `data` into equal-sized pieces (first: the first PSB).
    Searched near each cut only: listing every PSB of an 8 MB stream took 3 ms, a tenth of
    what each of two cores then decodes."""
    view = _searchable(data)
    first = view.find(PSB)
    if first < 0:
        return []
    pieces = max(1, min(pieces, len(data) // max(1, min_bytes) or 1))
    cuts = [first]
    for k in range(1, pieces):
        nxt = view.find(PSB, max(len(data) * k // pieces, cuts[-1] + len(PSB)))
        if nxt >= 0:
            cuts.append(nxt)
    return cuts


def psb_before(data, offset: int, back: int) -> int:
    """The offset of the PSB `back` PSBs before the one at `offset` (the first PSB of `data`
    if there are fewer)."""
    view = _searchable(data)
    for _ in range(back):
        before = view.rfind(PSB, 0, offset)
        if before < 0:
            break
        offset = before
    return offset


def _searchable(data):
    return data if hasattr(data, "find") else bytes(data)  # bytes, mmap: searched in place


def _decode_piece(index: int) -> tuple:
    data, image, opts, cuts, count_only = (_JOB[k] for k in ("data", "image", "opts", "cuts", "count"))
    from pt_decoder.insn import InsnDecoder
    start = cuts[index]
    stop = cuts[index + 1] if index + 1 < len(cuts) else None
    warm = _JOB["warm"].get(start)
    dec = InsnDecoder(data, image, start=start, stop=stop, warm_from=warm, **opts)
    if count_only:
        n, _ = dec.count()
        return n, dec.cyc_at_stop, dec.stopped
    flow = dec.decode()
    return flow, dec.cyc_at_stop, dec.stopped


def stitch_pieces(parts, cuts: list[int]):
    """Piece results (flow, cycles at the stop PSB, stopped), in order, as the
    pieces of the serial flow: each flow adjusted to continue the one before
    (yielded as they come, so a caller can print one and drop it)."""
    base_cyc = 0
    resynced = False
    for i, (flow, cyc_at_stop, _stopped) in enumerate(parts):
        if i > 0 and len(flow.flags) and not resynced and not _enabled_at_start(flow):
            # the serial decoder went on without a resync here (it resyncs, and marks
            # the next instruction RESUMED, only after an error since the last one;
            # tracing enabled or an overflow right at the cut marks it in both)
            flow.flags[0] &= ~RESUMED & 0xff
        n = len(flow.ip)
        resynced = any(kind in ("error", "sync_error") and pos == n
                       for kind, pos, *_ in flow.items) or (resynced and n == 0)
        if base_cyc and len(flow.cycles):
            add_to_column(flow.cycles, base_cyc)
        if i + 1 < len(cuts):
            stop = cuts[i + 1]
            # status updates of the next piece's PSB+ are that piece's to report
            flow.items = [it for it in flow.items
                          if not (it[0] == "event" and it[5]["status_update"] and it[2] >= stop)]
            base_cyc += cyc_at_stop
        yield flow


def _enabled_at_start(flow: FlowResult) -> bool:
    """Whether an event that marks the next instruction RESUMED in any decode
    (tracing enabled, an overflow) comes before the piece's first instruction."""
    return any(kind == "event" and pos == 0 and ev["type"] in ("enabled", "overflow")
               for kind, pos, _off, _ip, _code, ev in flow.items)


def stitch(parts: list[tuple], cuts: list[int]) -> FlowResult:
    """Join piece results (flow, cycles at the stop PSB, stopped) into one FlowResult."""
    out = None
    for flow in stitch_pieces(parts, cuts):
        if out is None:
            out = flow
        else:
            out.extend(flow)
    return out if out is not None else FlowResult(*(_empty()))


def _empty():
    from array import array
    return array("Q"), array("Q"), array("Q"), array("B"), []


def decode_parallel(data, image, workers: int | None = None, mode: str = "process",
                    count_only: bool = False, pieces: int | None = None, **opts):
    """The flow of `data` over `image`, decoded in PSB-aligned pieces on `workers`
    cores (default: all). Equals InsnDecoder(data, image, **opts).decode().
    count_only: return only the number of instructions (for benchmarks)."""
    from pt_decoder.insn import InsnDecoder
    workers = workers or os.cpu_count() or 1
    cuts = split_points(data, pieces or workers)
    if len(cuts) <= 1 or (workers == 1 and pieces is None):
        dec = InsnDecoder(data, image, **opts)
        return dec.count()[0] if count_only else dec.decode()
    parts = list(_decoded_pieces(data, image, cuts, workers, mode, count_only, opts))
    if count_only:
        return sum(n for n, _, _ in parts)
    return stitch(parts, cuts)


def decode_parallel_pieces(data, image, workers: int | None = None, mode: str = "process",
                           piece_bytes: int = 256 * 1024, on_piece=None, **opts):
    """decode_parallel's flow as a sequence of FlowResults, in order, of about
    `piece_bytes` of trace each: at most 2 x `workers` pieces are decoded or
    waiting at a time, so memory stays bounded however long the stream (what
    `ptdebug decode --parallel` prints from). Joined, they equal decode().
    on_piece(offset): the trace up to `offset` has been handed out."""
    workers = workers or os.cpu_count() or 1
    cuts = split_points(data, max(1, len(data) // max(1, piece_bytes)), min_bytes=piece_bytes)
    if len(cuts) <= 1:
        from pt_decoder.insn import InsnDecoder
        yield from InsnDecoder(data, image, **opts).chunks(1 << 18)
        return
    pieces = stitch_pieces(_decoded_pieces(data, image, cuts, workers, mode, False, opts), cuts)
    for index, flow in enumerate(pieces):
        yield flow
        if on_piece is not None:
            on_piece(cuts[index + 1] if index + 1 < len(cuts) else len(data))


def _decoded_pieces(data, image, cuts: list[int], workers: int, mode: str, count_only: bool, opts: dict):
    """_decode_piece of every cut, in order, with at most 2 x workers submitted ahead."""
    # Each piece but the first warms its timing up from the PSB two before its
    # start: the CYC calibration a serial decoder carries across the PSB.
    view = _searchable(data)
    warm = {c: psb_before(view, c, 2) for c in cuts[1:]}
    _JOB.update(data=data, image=image, opts=opts, cuts=cuts, count=count_only, warm=warm)
    try:
        if mode == "thread":
            pool = ThreadPoolExecutor(workers)
        else:
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        with pool:
            ahead = deque()
            for index in range(len(cuts)):
                ahead.append(pool.submit(_decode_piece, index))
                if len(ahead) >= 2 * workers:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
    finally:
        _JOB.clear()
