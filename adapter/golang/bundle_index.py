"""Goroutine history of a recorded bundle: decode each stream keeping its PTWRITE packets (the
goids the recorder wrote), find the Go binary among the bundle's images, and build the
GoroutineIndex of every thread; the answer of the `ptdebug/goroutineHistory` request.

Layer: adapter.golang. Uses adapter.capture.bundle (storage), pt_decoder (decoding) and
goroutine_index / runtime_layout; knows nothing of DAP sessions.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from adapter.capture.bundle import Bundle, BundleError

from .goroutine_index import GoroutineIndex, ptwrite_samples
from .runtime_layout import LayoutError, RuntimeLayout


class GoroutineHistoryError(Exception):
    """The bundle cannot give a goroutine history; the text says why."""


@dataclass
class ThreadGoroutines:
    tid: int
    history: object
    """pt_decoder.history.History of the thread."""
    samples: list[tuple[int, int]]
    """(position, goid) the recorder wrote (PTWRITE)."""
    index: GoroutineIndex


def go_binary(bundle: Bundle) -> str:
    """Path (inside the bundle, or the original) of the Go executable the bundle recorded."""
    for entry in bundle.images:
        if entry.get("kind", "elf") != "elf":
            continue
        for candidate in (str(bundle.image_path(entry)), entry.get("path") or ""):
            if candidate and os.path.isfile(candidate):
                try:
                    with open(candidate, "rb") as f:
                        from elftools.elf.elffile import ELFFile
                        if ELFFile(f).get_section_by_name(".gopclntab") is not None:
                            return candidate
                except (OSError, ValueError):
                    continue
    raise GoroutineHistoryError(f"{bundle.root}: no Go executable among the bundle's images")


_layouts: dict[tuple, RuntimeLayout] = {}
_layouts_lock = threading.Lock()


def _layout_key(path: str) -> tuple:
    """The binary's build-id (GNU's, else Go's) when it has one (a capture's bundle holds its own copy or
    hard link of the executable the adapter read when the program started: the same binary
    under another path), else (path, size, mtime). Raises OSError."""
    stat = os.stat(path)
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from pt_decoder.image import elf_identity
    try:
        with open(path, "rb") as f:
            build_id = elf_identity(ELFFile(f))
    except (ELFError, ValueError):
        build_id = None  # not an ELF file: RuntimeLayout.from_elf says so
    if build_id:
        return ("build-id", build_id)
    return (path, stat.st_size, stat.st_mtime_ns)


def runtime_layout(path: str) -> RuntimeLayout:
    """RuntimeLayout.from_elf, remembered per binary (its build-id, else path, size and
    mtime): reading the runtime's DWARF takes one to two and a half seconds, and every capture
    of a session records the same binary (each bundle under its own path). Raises
    LayoutError."""
    try:
        key = _layout_key(path)
    except OSError as exc:
        raise LayoutError(f"{path}: {exc.strerror}") from None
    with _layouts_lock:
        layout = _layouts.get(key)
        if layout is None:
            layout = _layouts[key] = RuntimeLayout.from_elf(path)
        return layout


def index_bundle(path: str | os.PathLike,
                 streams: list[int] | None = None) -> list[ThreadGoroutines]:
    """Decode the bundle and index each thread (only the streams numbered in `streams`, in
    manifest order, when given). Raises GoroutineHistoryError naming the bundle and what is
    wrong; the Go binary is looked for before anything is decoded."""
    from adapter.export.trace import StreamDecodeError, decode_stream_flows
    try:
        bundle = Bundle.open(path)
    except BundleError as exc:
        raise GoroutineHistoryError(str(exc)) from None
    try:
        layout = runtime_layout(go_binary(bundle))
    except LayoutError as exc:
        raise GoroutineHistoryError(str(exc)) from None
    out = []
    try:
        for _number, tid, flow in decode_stream_flows(bundle, streams):
            samples = ptwrite_samples(flow.items, flow.ip)
            index = GoroutineIndex.build(flow.ip, samples, layout.g_stores)
            out.append(ThreadGoroutines(tid, flow.to_history({"tid": tid}), samples, index))
    except StreamDecodeError as exc:
        raise GoroutineHistoryError(str(exc)) from None
    return out


def goroutine_history(args) -> dict:
    """The body of `ptdebug/goroutineHistory` (schema.GoroutineHistoryIn -> Out as a dict).
    Raises GoroutineHistoryError when the bundle cannot be indexed."""
    import dataclasses

    import numpy as np

    from adapter.protocol.schema import (
        GoroutineHistoryEntry,
        GoroutineHistoryOut,
        GoroutineRange,
    )
    threads = index_bundle(args.bundle)
    if args.thread is not None:
        threads = [t for t in threads if t.tid == args.thread]
        if not threads:
            raise GoroutineHistoryError(f"{args.bundle} has no recorded thread {args.thread}")
    bundle = Bundle.open(args.bundle)
    unit = "ns" if bundle.manifest.get("backend") == "stepper" else "tsc"
    entries = []
    for thread in threads:
        history = thread.history
        times = np.frombuffer(history.times(), dtype=np.uint64)
        cycles = np.frombuffer(history.cycles_range(), dtype=np.uint64)
        last = len(history) - 1
        for summary in thread.index.summaries(times, cycles):
            ranges = [GoroutineRange(a, b, int(times[a]), int(times[min(b, last)]))
                      for a, b in summary.ranges[:args.maxRanges]]
            entries.append(GoroutineHistoryEntry(
                thread.tid, summary.goid, summary.instructions, summary.time, summary.cycles,
                summary.confidence.name.lower(), ranges,
                len(summary.ranges) > args.maxRanges))
    return dataclasses.asdict(GoroutineHistoryOut(entries, unit))
