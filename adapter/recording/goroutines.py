"""The goroutine index of a Go recording: find the Go binary among the bundle's images, read
its runtime layout, and index each decoded thread from the goroutine ids the recorder wrote
(PTWRITE samples the recording's one decode kept). Built on first use by
`Recording.goroutines()`; nothing here decodes.

Layer: adapter.recording. Uses adapter.capture.bundle (the bundle's images),
adapter.golang (goroutine_index, runtime_layout); knows nothing of DAP sessions.
"""
from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

from adapter.capture.bundle import Bundle
from adapter.golang.goroutine_index import GoroutineIndex
from adapter.golang.runtime_layout import LayoutError, layout_of
from pt_decoder.image import is_go_binary


class GoroutineHistoryError(Exception):
    """The recording cannot give a goroutine history; the text says why."""


@dataclass
class ThreadGoroutines:
    tid: int
    history: object
    """pt_decoder.history.History of the thread (the recording's own)."""
    samples: list[tuple[int, int]]
    """(position, goid) the recorder wrote (PTWRITE)."""
    index: GoroutineIndex


def go_binary(bundle: Bundle) -> str:
    """Path (inside the bundle, or the original) of the Go executable the bundle recorded.
    Raises GoroutineHistoryError when there is none."""
    for entry in bundle.images:
        if entry.get("kind", "elf") != "elf":
            continue
        for candidate in (str(bundle.image_path(entry)), entry.get("path") or ""):
            if candidate and os.path.isfile(candidate) and is_go_binary(candidate):
                return candidate
    raise GoroutineHistoryError(f"{bundle.root}: no Go executable among the bundle's images")


def index_threads(root: str | os.PathLike, manifest: dict,
                  threads) -> dict[int, ThreadGoroutines]:
    """stream number -> ThreadGoroutines of each decoded thread (recording.ThreadTrace) that
    holds goroutine ids. Raises GoroutineHistoryError naming the bundle and what is wrong: no
    Go executable, a runtime layout that cannot be read, no goroutine id recorded at all."""
    try:
        layout = layout_of(go_binary(Bundle(pathlib.Path(root), manifest)))
    except (LayoutError, OSError) as exc:
        raise GoroutineHistoryError(str(exc)) from None
    out = {}
    for number, thread in enumerate(threads):
        samples = thread.ptwrites
        if not samples:
            continue
        index = GoroutineIndex.build(thread.history.ips(), samples, layout.g_stores)
        out[number] = ThreadGoroutines(thread.tid, thread.history, samples, index)
    if not out:
        raise GoroutineHistoryError(f"{root}: the recorder wrote no goroutine ids (recorded "
                                    "without the goid probe, or Intel PT without PTWRITE)")
    return out
