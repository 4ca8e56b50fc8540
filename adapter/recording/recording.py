"""A recording: a trace bundle decoded once, for every view of it. Per-thread histories with
their PTWRITE samples, function names and source lines for their addresses, cycles attributed
per instruction, and, built lazily from the same decode, each thread's Python frames and the
goroutine index of a Go recording.

Layer: adapter.recording. Reads a bundle through adapter.capture.bundle and decodes it with
pt_decoder's public layers (Image, InsnDecoder -> FlowResult -> History, LineTable). Its
consumers: a live session's captures (features/record_breakpoints), a replayed bundle
(backends/replay), the exports, `ptdebug latency`, the hot-lines language server and the
goroutine view. It knows nothing of DAP sessions or of how the bundle was recorded.

Attribution rule (used by every export, and by the tests that check them): the history's
`cycles` column is cumulative (CYC packets, pt_decoder/flow_result.py) and grows only at the
instructions whose packets carried cycles (branches, for Intel PT and for the stepper alike).
The cycles that appear at such an instruction were spent on every instruction since the
previous one that carried cycles: they are spread evenly over those instructions (the
remainder of the division to the last one). The first instruction of a thread, the first
after a gap and those after the last report get none; cycles across a gap are not counted.
Times are TSC values, converted to nanoseconds with the bundle's `timing.tsc_hz` (1 GHz when
the bundle does not say) and held where the decoder's estimate steps back (ThreadTrace.times_ns).

What the time and cycles are depends on the recorder (manifest `backend`): with Intel PT they
are the CPU's (TSC, CYC packets); the ptrace stepper writes CLOCK_MONOTONIC ns read at its
stops as a 1 GHz TSC and those ns as cycles, the time of a thread slowed by ptrace (about
5-11 us an instruction on the development VMs, docs/recording.md), not CPU time. Every view
labels such figures as stepper time (`Recording.stepper`, `timing_note`) and offers the
instruction counts, which are exact either way.
"""
from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from adapter.capture.bundle import Bundle, BundleError
from pt_decoder import insn_flags
from pt_decoder.errors import PtError
from pt_decoder.history import History
from pt_decoder.image import Image, elf_load_bias
from pt_decoder.lines import LineTable

UNKNOWN_FUNCTION = "[unknown]"
STEPPER_TIME = "stepper time"
"""How the views name the time of a stepper recording (module docstring)."""
STEPPER_CYCLES_NAME = "stepper_ns"

Progress = Callable[[str, float], None]
"""progress(message, fraction 0..1): told as each stream is decoded (for DAP progress)."""


DECODED_BYTES_PER_INSTRUCTION = 36
"""Memory one instruction takes while a stream is decoded whole: the decoder's columns (IP,
TSC, cycles, flags: 25 bytes) and the History built from them (about 9.2; both live at once)."""


def decode_budget() -> int:
    """How many instructions a whole decode may hold: three quarters of the memory available
    now (/proc/meminfo MemAvailable), at DECODED_BYTES_PER_INSTRUCTION each; at least 10^6."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
            else:
                return 1 << 62
    except (OSError, ValueError):
        return 1 << 62  # no way to tell: decode, as before
    return max(10**6, available * 3 // 4 // DECODED_BYTES_PER_INSTRUCTION)


MAX_WHOLE_INSTRUCTIONS = 20_000_000
"""A stream longer than this is not decoded whole (that takes some 4 s and 720 MB while
decoding, 180 MB held after, on the development VMs); its last TAIL_INSTRUCTIONS are
(_decode_tail)."""
WHOLE_DECODE_LIMIT_ENV = "PTDEBUG_WHOLE_DECODE_LIMIT"
"""Environment variable: instructions a stream may have and still be decoded whole, in
place of MAX_WHOLE_INSTRUCTIONS (a smaller machine, a quicker open)."""


def whole_decode_limit() -> int:
    """MAX_WHOLE_INSTRUCTIONS, or the environment's PTDEBUG_WHOLE_DECODE_LIMIT. Raises
    TraceError for a value that is no positive whole number."""
    text = os.environ.get(WHOLE_DECODE_LIMIT_ENV)
    if not text:
        return MAX_WHOLE_INSTRUCTIONS
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise TraceError(f"{WHOLE_DECODE_LIMIT_ENV}={text!r}: not a positive number of "
                         "instructions")
    return value


TAIL_INSTRUCTIONS = 10_000_000
"""How much of a stream too long to decode whole is loaded, from its end: where the
recording stopped, which is where an incident usually is."""
INDEX_AT_BYTES = 1 << 20
"""A stream of more trace bytes than this is counted first (its PSB index, kept in the
bundle: a pass that keeps nothing per instruction, some 5 times quicker than the decode), so
that one too long to decode whole is never decoded whole."""
MIN_TAIL_INSTRUCTIONS = 100_000
"""Below this much memory for a tail, opening refuses instead."""


def index_streams(path: str | os.PathLike, at_bytes: int | None = None) -> list[tuple[str, int]]:
    """Count the bundle's long streams now (those of more than `at_bytes`, INDEX_AT_BYTES by
    default) and keep their PSB indexes in its index/ folder, so that the first open of the
    bundle does not count them: what `ptdebug import` does for a large Intel PT recording.
    Returns (stream file, instructions) of each stream indexed. Raises TraceError."""
    root = os.fspath(path)
    limit = INDEX_AT_BYTES if at_bytes is None else at_bytes
    try:
        bundle = Bundle.open(root)
        code = code_image(bundle)
        options = decoder_options(bundle.manifest)
        counted = []
        for stream in bundle.streams:
            if int(stream.get("size") or 0) > limit:
                data = bundle.stream_bytes(stream)
                index = stream_index(root, stream, data, code, options, None)
                counted.append((str(stream.get("file")), index.instructions))
    except (BundleError, PtError, OSError, KeyError) as exc:
        raise TraceError(f"{root}: cannot count its streams: {exc}") from None
    return counted


def code_image(bundle: Bundle) -> Image:
    """The code bytes a bundle's streams are decoded against: each image mapped raw at its
    load address. Raises PtError, OSError (BundleFileError), KeyError."""
    code = Image()
    for entry in bundle.images:
        code.add_raw(str(bundle.image_path(entry)), entry["load_address"],
                     entry.get("offset", 0), entry.get("size"))
    return code


def stream_index(root: str, stream: dict, data, code: Image, options: dict,
                  progress: Progress | None):
    """The stream's PSB index (pt_decoder.chunked.StreamIndex): kept in the bundle's index/
    folder once built (where it can be written), so that a long stream is counted once.
    Raises PtError, OSError as the decode does."""
    from pt_decoder.chunked import StreamIndex
    name = os.path.basename(str(stream.get("file") or "stream"))
    kept = os.path.join(root, "index", name + ".chunks.json")
    key = {"file": stream.get("file"), "size": len(data), "options": options}
    index = StreamIndex.load(kept, key)
    if index is None:
        report = None if progress is None else (
            lambda done: progress(f"counting the instructions of {name}", done))
        # forked workers only where no other thread runs (the command line); in the DAP
        # adapter, threads (StreamIndex.build says why)
        mode = "process" if threading.active_count() == 1 else "thread"
        index = StreamIndex.build(data, code, progress=report, mode=mode, **options)
        try:
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            index.save(kept, key)
        except OSError:
            pass  # a read-only bundle: counted again next time
    return index


def _decode_tail(root: str, stream: dict, index, data, code: Image, options: dict, most: int,
                 progress: Progress | None) -> tuple[object, int, int]:
    """(FlowResult, position of its first instruction in the stream, instructions in the
    stream) of the last chunks of the indexed stream holding at most `most` instructions (at
    least the last chunk)."""
    total = index.instructions
    last = len(index.chunks) - 1
    first, _ = index.grown(last, last, True, most)
    if progress is not None:
        progress(f"decoding the last {total - index.starts[first]:,} of {total:,} "
                 "instructions", 0.9)
    return _decode_chunks(root, stream, index, data, code, options, first, last), \
        index.starts[first], total


def _decode_chunks(root: str, stream: dict, index, data, code: Image, options: dict,
                   first: int, last: int):
    """The FlowResult of chunks first..last of the indexed stream. Raises TraceError."""
    from pt_decoder.chunked import ChunkedHistory
    try:
        return ChunkedHistory(data, code, index, **options).decode_chunks(first, last)
    except PtError as exc:
        raise TraceError(f"{root}: stream {stream.get('file')}: {exc}") from None


class TraceError(Exception):
    """A bundle cannot be read or decoded; the text names the bundle and the reason."""


@dataclass
class ThreadTrace:
    """The decoded history of one thread of the bundle."""

    tid: int
    history: History
    name: str = ""
    ptwrites: list[tuple[int, int]] = field(default_factory=list)
    """(position, value) of the stream's PTWRITE packets, placed on the instruction the
    recorder meant (FlowResult.ptwrites: the goroutine ids of a Go recording, the Python
    frame samples of a Python one), kept so that no view decodes the stream again."""
    loaded_from: int = 0
    """Position in the recorded stream of the history's first instruction: 0, or where the
    tail of a stream too long to decode whole begins (Recording.open)."""
    recorded: int | None = None
    """Instructions in the recorded stream when only its tail is loaded, else None."""
    source: tuple | None = field(default=None, repr=False)
    """(stream entry, StreamIndex, decoder options) of a thread loaded in part: what
    Recording.load_window decodes another part of the stream from."""
    _weights: array | None = field(default=None, repr=False)
    _ns: array | None = field(default=None, repr=False)

    def cycle_weights(self) -> array:
        """Cycles of each instruction (array 'Q'), by the module's attribution rule."""
        if self._weights is None:
            cycles = self.history.cycles_range()
            n = len(cycles)
            gaps = {g.position for g in self.history.gaps}
            weights = array("Q", bytes(8 * n))
            reports = [i for i, (before, now) in enumerate(zip(cycles, cycles[1:]), 1)
                       if now != before or i in gaps]
            first = 1  # the first instruction that has not received its cycles yet
            for i in reports:
                if i in gaps:
                    first = i + 1  # the cycles across lost trace belong to nobody known
                    continue
                delta = cycles[i] - cycles[i - 1]
                if delta <= 0:
                    continue
                share, rest = divmod(delta, i - first + 1)
                if share:
                    weights[first:i + 1] = array("Q", [share]) * (i + 1 - first)
                weights[i] += rest
                first = i + 1
            self._weights = weights
        return self._weights

    def times_ns(self, tsc_hz: int) -> array:
        """Time of each instruction in ns (array 'Q'), never running backwards: where the
        decoder's estimate steps back (time between TSC packets is estimated from CYC/MTC
        and corrected at the next TSC), the latest time so far is kept."""
        if self._ns is None:
            times = self.history.times()
            if tsc_hz != 1_000_000_000:
                times = (tsc * 1_000_000_000 // tsc_hz for tsc in times)
            self._ns = array("Q", itertools.accumulate(times, max))
        return self._ns


class Recording:
    """A bundle's threads, decoded once; plus symbols and lines for its addresses, and the
    Python frames and goroutine index built from its PTWRITE samples when first asked for."""

    def __init__(self, root: str, manifest: dict, threads: list[ThreadTrace], code: Image,
                 symbols: Image):
        self.root = root
        self.manifest = manifest
        self.threads = threads
        """One entry per stream (thread), in manifest order."""
        self.code = code
        """The code bytes the streams were decoded against."""
        self.symbols = symbols
        """The bundle's ELF images at their load bias, for function names."""
        self._lines: LineTable | None = None
        self._go_functions: LineTable | None = None
        timing = manifest.get("timing") or {}
        self.tsc_hz = int(timing.get("tsc_hz") or 1_000_000_000)
        """TSC ticks per second."""
        self._function_cache: dict[int, tuple[str, int]] = {}
        self._python_frames: dict[int, object] = {}
        self._goroutines: tuple | None = None
        self._samples_lock = threading.Lock()
        self.notes: list[str] = []
        """What of the recording is not loaded, one sentence a thread, for the user (a
        stream too long to decode whole is loaded from its end: ThreadTrace.loaded_from)."""

    # -- what the time is ----------------------------------------------------------------
    @property
    def stepper(self) -> bool:
        """Whether the bundle's times are a wall clock of a thread the recorder slowed (the
        ptrace stepper's, or the DBI recorder's, whose manifest says `timing.clock` "wall"),
        not CPU time: its times and cycles are then "stepper time" in the views."""
        return self.manifest.get("backend") == "stepper" or \
            (self.manifest.get("timing") or {}).get("clock") == "wall"

    @property
    def slowed_by(self) -> str:
        """What slowed the recorded thread, in words (for the labels of a wall-clock time)."""
        return ("Frida's dynamic instrumentation" if self.manifest.get("backend") == "dbi"
                else "ptrace")

    @property
    def slowed_short(self) -> str:
        """`slowed_by` in one word, for the short labels ("ptrace-slowed", "DBI-slowed")."""
        return "DBI" if self.manifest.get("backend") == "dbi" else "ptrace"

    @property
    def cycles_name(self) -> str:
        """What the cycles column is called where a name has to be short (pprof sample type,
        Perfetto argument, JSON key): `cycles`, or `stepper_ns` for a stepper recording."""
        return STEPPER_CYCLES_NAME if self.stepper else "cycles"

    @property
    def clock(self) -> str:
        """Which clock the times and cycles are: "stepper" (the stepper's wall-clock ns, its
        cycles the same ns) or "tsc" (the CPU's TSC, cycles from CYC packets). The same
        values as the `clock` of `ptdebug latency --json`, `export` and the hot-line lenses."""
        return "stepper" if self.stepper else "tsc"

    @property
    def clock_label(self) -> str:
        """The clock in words, for a view that shows times or cycles (the capture event)."""
        if self.stepper:
            return (f"{STEPPER_TIME}: wall-clock ns of a thread slowed by {self.slowed_by}, "
                    "not CPU time; its cycles are those ns")
        timing = self.manifest.get("timing") or {}
        return ("CPU time: TSC; cycles from CYC packets" if timing.get("cyc")
                else "CPU time: TSC; no CYC packets were recorded, so cycles are not "
                "cycle-accurate")

    def timing_note(self) -> str | None:
        """One sentence saying what a stepper recording's times are, with this recording's
        time per instruction; None for a recording whose times are the CPU's."""
        if not self.stepper:
            return None
        spent = sum(t.times_ns(self.tsc_hz)[-1] - t.times_ns(self.tsc_hz)[0]
                    for t in self.threads if len(t.history))
        count = self.total_instructions
        rate = f", {spent / count / 1000:.1f} us an instruction in this recording" if count \
            else ""
        recorder = "the DBI recorder" if self.manifest.get("backend") == "dbi" \
            else "the ptrace stepper"
        return (f"recorded by {recorder}: times and cycles are {STEPPER_TIME} (the "
                f"wall-clock ns of a thread slowed by {self.slowed_by}{rate}), not CPU time; "
                "instruction counts are exact")

    # -- opening -------------------------------------------------------------------------
    @classmethod
    def open_for_command(cls, path: str | os.PathLike, command: str,
                         progress: Progress | None = None) -> Recording | None:
        """`open` for a command-line tool: on failure the reason goes to stderr as
        "ptdebug COMMAND: ..." and None comes back (the tool then exits with status 2: the
        bundle given is bad input, adapter/cli.py). `progress` as for open()."""
        try:
            recording = cls.open(path, progress)
        except TraceError as exc:
            print(f"ptdebug {command}: {exc}", file=sys.stderr)
            return None
        for note in recording.notes:
            print(f"ptdebug {command}: note: {note}", file=sys.stderr)
        return recording

    @classmethod
    def open(cls, path: str | os.PathLike, progress: Progress | None = None) -> Recording:
        """Decode every stream of the bundle at `path`.

        Raises TraceError naming the bundle when it is missing, unreadable or not decodable.
        Trace damage inside a stream is not an error: it becomes the history's gaps.
        """
        root = os.fspath(path)
        try:
            bundle = Bundle.open(root)
        except BundleError as exc:
            raise TraceError(str(exc)) from None
        manifest = bundle.manifest
        symbols = Image()
        seen: set[tuple[str, int]] = set()
        try:
            code = code_image(bundle)
            for entry in bundle.images:
                file = str(bundle.image_path(entry))
                if entry.get("kind") == "elf":
                    bias = elf_load_bias(file, entry["load_address"], entry.get("offset", 0))
                    if bias is not None and (file, bias) not in seen:
                        seen.add((file, bias))
                        symbols.add_elf(file, bias)
            for entry in bundle.symbol_maps:  # JIT code's names (CPython's -X perf)
                symbols.add_perf_map(str(bundle.symbol_map_path(entry)), any_owner=True)
        except (PtError, OSError, KeyError) as exc:
            raise TraceError(f"{root}: cannot map the bundle's images: {exc}") from None
        options = decoder_options(manifest)
        names = {t.get("tid"): t.get("comm") or "" for t in manifest.get("threads", [])}
        threads = []
        notes: list[str] = []
        streams = bundle.streams
        from pt_decoder.insn import InsnDecoder  # the compiled layer, loaded only when decoding
        for number, stream in enumerate(streams):
            report = None
            if progress is not None:
                message = f"decoding thread {stream.get('tid')}"
                progress(message, number / max(1, len(streams)))
            tid = int(stream.get("tid") or 0)
            index, data = None, b""
            try:
                data = bundle.stream_bytes(stream)
                budget = decode_budget() - sum(len(t.history) for t in threads)
                whole = min(max(0, budget), whole_decode_limit())
                if len(data) > INDEX_AT_BYTES:  # count first: decode whole, or its end only
                    index = stream_index(root, stream, data, code, options, progress)
                if index is None or index.instructions <= whole:
                    decoder = InsnDecoder(data, code, **options)
                    if progress is not None:
                        report = functools.partial(_report_offset, progress, message, decoder,
                                                   max(1, len(data)), number, len(streams))
                    flow = decoder.decode(whole + 1, progress=report)
                    over = len(flow.ip) > whole
                else:
                    flow, over = None, True
            except (PtError, OSError) as exc:
                raise TraceError(f"{root}: stream {stream.get('file')}: {exc}") from None
            except MemoryError:
                budget, flow, over = -1, None, True
            loaded_from, total = 0, None
            if over:
                flow = None  # give the columns back first
                room = min(TAIL_INSTRUCTIONS, budget)  # what memory allows
                if room < MIN_TAIL_INSTRUCTIONS:
                    raise TraceError(
                        f"{root}: the recording holds more instructions than this machine's "
                        f"free memory can hold decoded (about {max(0, budget):,} "
                        f"instructions, {DECODED_BYTES_PER_INSTRUCTION} bytes each while "
                        f"decoding): stream {stream.get('file')} alone is {len(data):,} "
                        "bytes of trace") from None
                if index is None:
                    index = stream_index(root, stream, data, code, options, progress)
                flow, loaded_from, total = _decode_tail(root, stream, index, data, code,
                                                        options, min(room, whole), progress)
                if loaded_from:
                    notes.append(f"thread {tid}: {total:,} instructions were recorded, more "
                                 f"than are decoded whole here (at most {whole:,}); its last "
                                 f"{total - loaded_from:,} are loaded (from instruction "
                                 f"{loaded_from:,}), not the history before them")
            history = flow.to_history({"tid": tid, "bundle": root})
            threads.append(ThreadTrace(tid, history, names.get(tid, ""), flow.ptwrites(),
                                       loaded_from=loaded_from, recorded=total,
                                       source=(stream, index, options) if total else None))
        if progress is not None:
            progress("decoded", 1.0)
        recording = cls(root, manifest, threads, code, symbols)
        recording.notes = notes
        return recording

    # -- another part of a stream loaded in part -----------------------------------------
    def load_window(self, number: int, around: int, before: bool) -> ThreadTrace:
        """Load the part of stream `number` (a thread loaded in part: ThreadTrace.source) that
        holds stream position `around` and the one a step goes on to (`before`: around - 1,
        else around + 1): as many whole chunks as the tail Recording.open loads may hold
        (TAIL_INSTRUCTIONS, whole_decode_limit, free memory), ending with `around`'s chunk or
        beginning with it. The thread's entry is replaced (its samples, Python frames and the
        recording's goroutine index are built again for it) and returned. Raises TraceError."""
        old = self.threads[number]
        if old.source is None:
            raise TraceError(f"{self.root}: thread {old.tid} is loaded whole")
        stream, index, options = old.source
        most = max(1, min(TAIL_INSTRUCTIONS, whole_decode_limit(), decode_budget()))
        around = max(0, min(around, index.instructions - 1))
        # with the instruction a step would go on to (around -/+ 1) even where that lies in
        # the neighbouring chunk, and as many more chunks as fit
        step_to = max(0, min(index.instructions - 1, around + (-1 if before else 1)))
        first, last = sorted((index.chunk_of(around), index.chunk_of(step_to)))
        first, last = index.grown(first, last, before, most)
        try:
            data = Bundle.open(self.root).stream_bytes(stream)
        except (BundleError, OSError) as exc:
            raise TraceError(f"{self.root}: stream {stream.get('file')}: {exc}") from None
        flow = _decode_chunks(self.root, stream, index, data, self.code, options, first, last)
        thread = ThreadTrace(old.tid, flow.to_history({"tid": old.tid, "bundle": self.root}),
                             old.name, flow.ptwrites(), loaded_from=index.starts[first],
                             recorded=old.recorded, source=old.source)
        with self._samples_lock:
            self.threads[number] = thread
            self._python_frames.pop(id(old), None)
            self._goroutines = None
        return thread

    # -- what the recorder wrote (PTWRITE samples) ----------------------------------------
    @property
    def python_table(self) -> dict | None:
        """The manifest's table of Python code objects, None for a recording made without
        Python attribution."""
        table = self.manifest.get("python")
        return table if isinstance(table, dict) else None

    def python_frames(self, thread: ThreadTrace):
        """pt_decoder.python_frames.PythonFrames of `thread` (each position's Python frame:
        code object, file, line), built from its samples on first use and kept; None for a
        recording without Python attribution; attached to the thread's History too (its
        python_frame, python_stack and Python line steps). debugpy's own frames (its trace function's
        helpers, in a capture made under it) read as the program's frame they interrupted, in
        every view (adapter/python/debugger_frames.py). Raises TraceError when the table is
        damaged."""
        table = self.python_table
        if table is None:
            return None
        with self._samples_lock:
            frames = self._python_frames.get(id(thread))
            if frames is None:
                from adapter.python.debugger_frames import debugger_codes, fold_debugger_frames
                from pt_decoder.python_frames import PythonFrames
                samples = fold_debugger_frames(thread.ptwrites, debugger_codes(table))
                try:
                    frames = PythonFrames.from_manifest(table, samples, len(thread.history))
                except (KeyError, ValueError, TypeError) as exc:
                    raise TraceError(f"{self.root}: the manifest's Python table is damaged: "
                                     f"{exc}") from None
                self._python_frames[id(thread)] = frames
                if len(frames):  # every view of the thread's history sees the same frames
                    thread.history.attach_python(frames)
            return frames

    def goroutines(self) -> dict:
        """stream number -> recording.goroutines.ThreadGoroutines of the threads of a Go
        recording that hold goroutine ids, built from the samples on first use and kept.
        Raises goroutines.GoroutineHistoryError saying why there is none (not a Go program, no
        goroutine id recorded)."""
        from adapter.recording.goroutines import GoroutineHistoryError, index_threads
        with self._samples_lock:
            if self._goroutines is None:
                try:
                    self._goroutines = (index_threads(self.root, self.manifest, self.threads),
                                        None)
                except GoroutineHistoryError as exc:
                    self._goroutines = (None, str(exc))
            found, why = self._goroutines
        if found is None:
            raise GoroutineHistoryError(why)
        return found

    # -- addresses -----------------------------------------------------------------------
    @property
    def lines(self) -> LineTable:
        """Address -> source line, for the images that carry their own line information
        (.debug_line or Go's .gopclntab). System libraries whose lines live in a separate
        debug package are left out on purpose: reading libc's takes a minute, and a hot-path
        view is about the user's code."""
        if self._lines is None:
            self._lines = LineTable.for_image(self.symbols,
                                              accept=lambda module: has_own_lines(module.path))
        return self._lines

    @property
    def go_functions(self) -> LineTable:
        """The Go binaries' pclntab only: what `function` falls back on where the symbol
        table has no name. Not `lines`: a DWARF table names no function, and building one
        for a Python built with -g (pyenv's libpython) took 20-60 s to name nothing."""
        if self._go_functions is None:
            self._go_functions = LineTable.for_image(self.symbols,
                                                     accept=lambda module: has_own_lines(
                                                         module.path, (".gopclntab",)))
        return self._go_functions

    def function(self, ip: int) -> tuple[str, int]:
        """(function name, entry address) holding `ip`; ("[unknown]", ip) if none is known.
        The name is as views show it (C++ and Rust demangled); `linkage_name` gives the
        symbol's own."""
        found = self._function_cache.get(ip)
        if found is None:
            symbol = self.symbols.symbolize(ip)
            if symbol is not None:
                found = (symbol.display, ip - symbol.offset)
            else:
                go = self.go_functions.function(ip)
                found = go if go is not None else (_module_label(self.manifest, ip), ip)
            self._function_cache[ip] = found
        return found

    def linkage_name(self, ip: int) -> str | None:
        """The symbol table's (mangled) name of the function holding `ip`, or None."""
        symbol = self.symbols.symbolize(ip)
        return symbol.name if symbol is not None else None

    def line(self, ip: int) -> tuple[str, int] | None:
        """(source file, line) of `ip`, or None where there is no line information."""
        return self.lines.lookup(ip)

    def ns(self, tsc: int) -> int:
        """A TSC value in nanoseconds."""
        return tsc if self.tsc_hz == 1_000_000_000 else tsc * 1_000_000_000 // self.tsc_hz

    def times_ns(self, thread: ThreadTrace) -> array:
        """`thread`'s instruction times in ns, never running backwards."""
        return thread.times_ns(self.tsc_hz)

    @property
    def total_cycles(self) -> int:
        return sum(sum(t.cycle_weights()) for t in self.threads)

    @property
    def total_instructions(self) -> int:
        return sum(len(t.history) for t in self.threads)


def call_depth_changes(flags: array, start: int = 0) -> list[tuple[int, int]]:
    """(position, +1 for a call / -1 for a return) of the control transfers in `flags`,
    positions counted from `start`. Far transfers (syscalls, interrupts) do not count."""
    out = []
    for i, f in enumerate(flags):
        if f & insn_flags.FAR:
            continue
        if f & insn_flags.CALL:
            out.append((start + i, 1))
        elif f & insn_flags.RETURN:
            out.append((start + i, -1))
    return out


def decoder_options(manifest: dict) -> dict:
    """InsnDecoder keyword arguments from the manifest's timing and CPU."""
    timing = manifest.get("timing") or {}
    options = {name: timing[name] for name in ("mtc_freq", "nom_freq", "cpuid_0x15_eax",
                                               "cpuid_0x15_ebx") if timing.get(name) is not None}
    cpu = manifest.get("cpu") or {}
    if cpu.get("vendor", "GenuineIntel") == "GenuineIntel" and cpu.get("family"):
        from pt_decoder.event import cpu_errata
        try:
            options["errata"] = cpu_errata(cpu["family"], cpu["model"], cpu.get("stepping", 0))
        except PtError:
            pass  # an unknown CPU: decode without its errata workarounds
    return options


def _report_offset(progress: Progress, message: str, decoder, size: int, index: int,
                   streams: int) -> None:
    """A stream's decode so far, by the share of its bytes read, as a share of all streams."""
    progress(message, (index + decoder.offset / size) / streams)


_own_lines: dict[tuple, bool] = {}


def has_own_lines(path: str,
                  sections: tuple[str, ...] = (".debug_line", ".zdebug_line", ".gopclntab")) -> bool:
    """Whether the ELF file at `path` holds one of `sections` (its own line information);
    remembered per file (path, size, mtime): a Python capture maps a hundred extension
    modules, and every view asks of each."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        st = os.stat(path)
    except OSError:
        return False
    key = (path, st.st_size, st.st_mtime_ns, sections)
    found = _own_lines.get(key)
    if found is None:
        try:
            with open(path, "rb") as f:
                elf = ELFFile(f)
                found = any(elf.get_section_by_name(name) is not None for name in sections)
        except (OSError, ELFError):
            found = False
        _own_lines[key] = found
    return found


def _module_label(manifest: dict, ip: int) -> str:
    """`[libc.so.6]` for code of a module that has no symbol there (a stripped library's
    static function): one name per module, so such code adds up instead of scattering."""
    for image in manifest.get("images", []):
        start = image.get("load_address", 0)
        if start <= ip < start + image.get("size", 0):
            return f"[{os.path.basename(image.get('path') or image.get('file', '?'))}]"
    return UNKNOWN_FUNCTION
