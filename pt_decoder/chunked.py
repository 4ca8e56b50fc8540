"""A stream larger than memory: indexed by PSB once, decoded chunk by chunk when a position is
asked for, a bounded number of decoded chunks kept.

Layer: pt_decoder, above insn.pyx (one InsnDecoder per chunk) and history.py (each chunk is a
History), beside parallel.py (whose PSB-piece rules it shares: a decoder synchronised at a
PSB continues exactly as the serial decoder does, with the timing warmed up from two PSBs
before; see there). Knows nothing of bundles or DAP.

Why: the whole-stream History costs about 9.2 bytes an instruction (docs/PERFORMANCE.md); a
second of Intel PT on a busy core is around 10^9 instructions, 9 GB. A `StreamIndex` is one
record per chunk of about `chunk_bytes` of trace (its PSB offset, where its timing warm-up
starts, its instruction count, the cycles it adds, its first TSC, whether it ends in lost
sync), built by one pass that keeps nothing per instruction (in parallel, in PSB-aligned
pieces), and saved beside the stream so that it is built once. `ChunkedHistory` answers
positions over the whole stream from it: a position's chunk by bisection of the cumulative
counts, the chunk decoded on first use (some 15-20 ms for the default 32 KiB, about 200,000
instructions), at most `cache_chunks` kept (least recently used first out); a line step
decodes a window of a few chunks as one History (prev_line).

Exactness: a chunk's instructions, times, cycles (offset by the cycles before it) and flags are
those of the whole-stream decode at the same positions (tests/pt_decoder/test_chunked.py
compares every position of a real-path stream); the RESUMED flag of a chunk's first
instruction follows parallel.stitch_pieces' rule, with the end state of the chunk before it
taken from the index.
"""
from __future__ import annotations

import bisect
import contextlib
import functools
import json
import multiprocessing
import os
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass

from pt_decoder.errors import ErrorCode, PtError
from pt_decoder.insn_flags import RESUMED
from pt_decoder.parallel import psb_offsets

CHUNK_BYTES = 32 * 1024
"""Trace bytes per chunk: about 200,000 instructions of a typical user-space stream, decoded
in some 15-20 ms on the development VMs (what a step back into a chunk not yet decoded
waits)."""
MAX_WINDOW_CHUNKS = 4
"""Most chunks a line step joins into one History to see the frames it passes (prev_line)."""
INDEX_VERSION = 1

_FORKED_JOB: list = []
"""The job of the StreamIndex.build forking now (a command-line process forks one at a time:
builds that may run side by side, in the adapter, use threads and pass their job along)."""


@dataclass(frozen=True)
class Chunk:
    offset: int
    """Trace offset of the PSB the chunk starts at."""
    warm: int | None
    """Offset of the PSB two before it, where its timing calibration is replayed from."""
    instructions: int
    cycles: int
    """Cycles the chunk adds to the cumulative count (the decoder's count at the next PSB)."""
    first_tsc: int | None
    """TSC of its first instruction (None for a chunk without instructions)."""
    ends_in_error: bool
    """Whether the decode lost sync right at its end (then the next chunk's first instruction
    is RESUMED in the serial decode too)."""
    enabled_at_start: bool
    """Whether tracing is enabled (or an overflow ends) before its first instruction."""


class StreamIndex:
    """The chunks of one stream, in order, with the cumulative instruction and cycle counts."""

    def __init__(self, chunks: list[Chunk], size: int, chunk_bytes: int):
        self.chunks = chunks
        self.size = size
        self.chunk_bytes = chunk_bytes
        self.starts = [0]
        """Position of each chunk's first instruction; the last entry is the total."""
        self.cycles_before = [0]
        for chunk in chunks:
            self.starts.append(self.starts[-1] + chunk.instructions)
            self.cycles_before.append(self.cycles_before[-1] + chunk.cycles)

    @property
    def instructions(self) -> int:
        return self.starts[-1]

    def chunk_of(self, pos: int) -> int:
        """Number of the chunk holding position `pos` (0 <= pos < instructions)."""
        return bisect.bisect_right(self.starts, pos) - 1

    def grown(self, first: int, last: int, before: bool, most: int) -> tuple[int, int]:
        """Chunks first..last grown by whole chunks towards the stream's start (`before`) or
        its end while they hold at most `most` instructions (never fewer than given)."""
        starts = self.starts
        if before:
            while first > 0 and starts[last + 1] - starts[first - 1] <= most:
                first -= 1
        else:
            while last + 1 < len(self.chunks) and starts[last + 2] - starts[first] <= most:
                last += 1
        return first, last

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def build(cls, data, image, chunk_bytes: int | None = None, workers: int | None = None,
              progress=None, mode: str = "process", **options) -> StreamIndex:
        """Index `data` (a stream's bytes) decoded over `image` with InsnDecoder `options`:
        one pass keeping nothing per instruction, on `workers` forked processes (default: one
        a core), or with mode "thread" on threads: for a process that runs other threads (the
        DAP adapter), where a lock one of them holds at a fork stays held in the child. The
        threads gain little (the decoder holds the GIL between its pieces: 4.6 s with two
        against 4.8 s with one for 10^8 instructions, 3.0 s with two processes).
        progress(fraction) is told as chunks are done. Raises PtError for a stream without a
        PSB."""
        chunk_bytes = chunk_bytes or CHUNK_BYTES
        psbs = psb_offsets(data)
        if not psbs:
            raise PtError(ErrorCode.NOSYNC, None, "the stream holds no PSB: it cannot be indexed")
        cuts = [psbs[0]]
        for offset in psbs[1:]:
            if offset - cuts[-1] >= chunk_bytes:
                cuts.append(offset)
        where = {p: i for i, p in enumerate(psbs)}
        warm = [None] + [psbs[max(0, where[c] - 2)] for c in cuts[1:]]
        job = (data, image, options, cuts, warm)
        workers = max(1, min(workers or os.cpu_count() or 1, len(cuts)))
        parts = []
        if workers == 1:
            for k in range(len(cuts)):
                parts.append(_count_chunk(job, k))
                if progress is not None:
                    progress((k + 1) / len(cuts))
        elif mode == "thread":  # the job travels with each call: builds may run side by side
            pool = ThreadPoolExecutor(workers)
            with _stopping(pool):
                for part in pool.map(functools.partial(_count_chunk, job), range(len(cuts))):
                    parts.append(part)
                    if progress is not None:
                        progress(len(parts) / len(cuts))
        else:
            _FORKED_JOB.append(job)  # inherited by the forked workers, not pickled
            try:
                pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
                with _stopping(pool):
                    for part in pool.map(_count_forked_chunk, range(len(cuts)),
                                         chunksize=max(1, len(cuts) // (8 * workers))):
                        parts.append(part)
                        if progress is not None:
                            progress(len(parts) / len(cuts))
            finally:
                _FORKED_JOB.clear()
        chunks = [Chunk(cut, warm[k], *parts[k]) for k, cut in enumerate(cuts)]
        return cls(chunks, len(data), chunk_bytes)

    # -- kept beside the stream -------------------------------------------------------------
    def save(self, path: str | os.PathLike, key: dict) -> None:
        """Write the index to `path` (atomically), with `key`: what it was built from."""
        body = {"version": INDEX_VERSION, "key": key, "size": self.size,
                "chunk_bytes": self.chunk_bytes, "chunks": [asdict(c) for c in self.chunks]}
        tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(body, f, separators=(",", ":"))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, key: dict) -> StreamIndex | None:
        """The index saved at `path` for the same `key`, else None (missing, another
        version or key, damaged)."""
        try:
            with open(path) as f:
                body = json.load(f)
            if body.get("version") != INDEX_VERSION or body.get("key") != key:
                return None
            return cls([Chunk(**c) for c in body["chunks"]], int(body["size"]),
                       int(body["chunk_bytes"]))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # AttributeError: valid JSON that is no object


@contextlib.contextmanager
def _stopping(pool):
    """Shut `pool` down at the end; on an exception (a progress report raising Cancelled, the
    client's cancel) without waiting for the chunks not begun: `with pool` waited for every
    chunk, so a cancel came back only when the whole index was built."""
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _count_forked_chunk(k: int) -> tuple:
    """_count_chunk in a forked worker, of the job its parent left in _FORKED_JOB."""
    return _count_chunk(_FORKED_JOB[-1], k)


def _count_chunk(job: tuple, k: int) -> tuple:
    """(instructions, cycles, first TSC, ends in error, enabled at start) of chunk k of
    job (data, image, decoder options, chunk offsets, warm-up offsets)."""
    from pt_decoder.insn import InsnDecoder
    data, image, options, cuts, warm = job
    stop = cuts[k + 1] if k + 1 < len(cuts) else None
    decoder = InsnDecoder(data, image, start=cuts[k], stop=stop, warm_from=warm[k], **options)
    count = 0
    first_tsc = None
    enabled = False
    ends_in_error = False

    def account(n: int, items) -> None:
        nonlocal count, enabled, ends_in_error
        if count == 0:
            enabled = enabled or any(kind == "event" and pos == 0 and ev["type"] in
                                     ("enabled", "overflow")
                                     for kind, pos, _o, _i, _c, ev in items)
        if n or items:
            ends_in_error = any(kind in ("error", "sync_error") and pos == n
                                for kind, pos, *_ in items) or (ends_in_error and n == 0)
        count += n

    # the first instruction with its columns (its TSC), then the rest counted without them
    # (8 MB benchmark stream, 248 chunks, one worker: 0.21 s, against 0.22 s for one decode
    # that keeps every column and 0.13 s for a whole count; docs/PERFORMANCE.md)
    for piece in decoder.chunks(1, views=True):
        account(len(piece.ip), piece.items)
        if len(piece.ip):
            first_tsc = int(piece.tsc[0])
            break
    for n, items in decoder.count_chunks(1 << 14):
        account(n, items)
    cycles = decoder.cyc_at_stop if stop is not None else 0
    return count, cycles, first_tsc, ends_in_error, enabled


class ChunkedHistory:
    """Positions of a whole stream, answered chunk by chunk (module docstring)."""

    def __init__(self, data, image, index: StreamIndex, cache_chunks: int = 8, **options):
        self.data = data
        self.image = image
        self.index = index
        self.options = options
        self.cache_chunks = max(1, cache_chunks)
        self._flows: OrderedDict[int, object] = OrderedDict()
        """chunk number -> its FlowResult (columns in whole-stream terms)."""
        self._windows: OrderedDict[tuple[int, int], object] = OrderedDict()
        """(first, last) chunk -> the History of chunks first..last (line steps)."""
        self.decoded = 0
        """How many decoder runs were made (a measure for tests and benchmarks)."""

    def __len__(self) -> int:
        return self.index.instructions

    # -- decoding ---------------------------------------------------------------------------
    def decode_chunks(self, first: int, last: int):
        """The FlowResult of chunks first..last, as the whole-stream decode has them: the
        RESUMED flag of a sync at the cut cleared as parallel.stitch_pieces does, the
        cycles counted on from the chunks before."""
        from pt_decoder.insn import InsnDecoder, add_to_column
        chunks = self.index.chunks
        stop = chunks[last + 1].offset if last + 1 < len(chunks) else None
        flow = InsnDecoder(self.data, self.image, start=chunks[first].offset, stop=stop,
                           warm_from=chunks[first].warm, **self.options).decode()
        self.decoded += 1
        want = self.index.starts[last + 1] - self.index.starts[first]
        if len(flow.ip) != want:
            raise PtError(ErrorCode.INTERNAL, None, f"chunks {first}-{last} decoded to "
                          f"{len(flow.ip)} instructions, the index says {want}: the stream "
                          "changed since it was indexed")
        if first > 0 and len(flow.flags) and not chunks[first - 1].ends_in_error \
                and not chunks[first].enabled_at_start:
            flow.flags[0] &= ~RESUMED & 0xff
        before = self.index.cycles_before[first]
        if before and len(flow.cycles):
            add_to_column(flow.cycles, before)
        return flow

    def flow(self, k: int):
        """The FlowResult of chunk `k` (positions from 0; index.starts[k] in the whole),
        decoded on first use and kept among the `cache_chunks` most recently used."""
        flow = self._flows.get(k)
        if flow is not None:
            self._flows.move_to_end(k)
            return flow
        flow = self._flows[k] = self.decode_chunks(k, k)
        while len(self._flows) > self.cache_chunks:
            self._flows.popitem(last=False)
        return flow

    def chunk(self, k: int):
        """The History of chunk `k` alone (positions from 0)."""
        return self.window(k, k)

    def window(self, first: int, last: int):
        """The History of chunks first..last as one (positions from index.starts[first]),
        the last two asked for kept."""
        found = self._windows.get((first, last))
        if found is not None:
            self._windows.move_to_end((first, last))
            return found
        flow = self.flow(first) if first == last else self.decode_chunks(first, last)
        found = flow.to_history({"chunks": (first, last), "start": self.index.starts[first]})
        self._windows[(first, last)] = found
        while len(self._windows) > 2:
            self._windows.popitem(last=False)
        return found

    def locate(self, pos: int) -> tuple[int, int]:
        """(chunk number, position inside it) of whole-stream position `pos`."""
        if not 0 <= pos < len(self):
            raise IndexError(f"position {pos} outside the history (0..{len(self) - 1})")
        k = self.index.chunk_of(pos)
        return k, pos - self.index.starts[k]

    # -- one instruction --------------------------------------------------------------------
    def _column(self, pos: int, name: str) -> int:
        k, at = self.locate(pos)
        return getattr(self.flow(k), name)[at]

    def ip(self, pos: int) -> int:
        return self._column(pos, "ip")

    def time(self, pos: int) -> int:
        return self._column(pos, "tsc")

    def cycles(self, pos: int) -> int:
        return self._column(pos, "cycles")

    def flags(self, pos: int) -> int:
        return self._column(pos, "flags")

    # -- moving -----------------------------------------------------------------------------
    def prev_line(self, pos: int, lines, over_calls: bool = True):
        """History.prev_line over the whole stream, positions in whole-stream numbering.

        A line step follows frames (over a call, out past a function's entry to its caller's
        line) and ends at the start of a line's run, so it may need instructions from well
        before `pos`. It is made in `pos`'s chunk, and where the answer could lie before the
        chunk's start (the scan reached it), again in a window of chunks joined into one
        History, growing back to MAX_WINDOW_CHUNKS: the whole-stream decode's answer whenever
        it lies inside that window (a line whose single run, or a frame stepped over, spans
        more than some 600,000 instructions stops at the window's start)."""
        from pt_decoder.history import Step
        k, at = self.locate(pos)
        first = k
        while True:
            base = self.index.starts[first]
            step = self.window(first, k).prev_line(pos - base, lines, over_calls=over_calls,
                                                   say_undecided=True)
            settled = step.reason in ("found", "gap")  # decided inside the window
            if settled or first == 0 or k - first + 1 >= MAX_WINDOW_CHUNKS:
                reason = "found" if step.reason == "undecided" else step.reason
                return Step(step.position + base, reason, step.gap)
            first -= 1

    def position_at_time(self, tsc: int) -> int | None:
        """A position whose time is at most `tsc` and whose successor's is greater (None
        before the first): found in the last chunk that starts at or before `tsc`. Where the
        decoder's time estimate steps back (corrected at the next TSC) it may differ from
        History.position_at_time's answer, which is the first such place of all."""
        firsts = [(c.first_tsc if c.first_tsc is not None else -1) for c in self.index.chunks]
        k = bisect.bisect_right(firsts, tsc) - 1
        while k >= 0 and not self.index.chunks[k].instructions:
            k -= 1
        if k < 0:
            return None
        at = self.chunk(k).position_at_time(tsc)
        if at is None:  # the chunk's estimate starts above its first TSC: the one before
            return self.index.starts[k] - 1 if k > 0 else None
        return at + self.index.starts[k]

    @property
    def nbytes(self) -> int:
        """Bytes held by the decoded chunks and windows kept now."""
        flows = sum(len(f.ip) * 25 for f in self._flows.values())  # ip, tsc, cycles, flags
        return flows + sum(h.nbytes for h in self._windows.values())
