"""Python history of a recorded bundle: decode each stream keeping its PTWRITE packets (the
Python frame samples the recorder wrote), and give each thread's History its PythonFrames
(position -> code object, file, line) from the manifest's table of code objects.

Layer: adapter.python. Uses adapter.capture.bundle (storage) and pt_decoder (decoding,
python_frames); knows nothing of DAP sessions.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from adapter.capture.bundle import Bundle, BundleError
from pt_decoder.python_frames import PythonFrames, samples_from_flow


class PythonHistoryError(Exception):
    """The bundle cannot give a Python history; the text says why."""


@dataclass
class ThreadPython:
    tid: int
    history: object
    """pt_decoder.history.History of the thread, with `python` attached."""
    samples: list[tuple[int, int]]
    """(position, PTWRITE value) of the Python samples in the stream."""


def python_histories(path: str | os.PathLike,
                     streams: list[int] | None = None) -> list[ThreadPython]:
    """Decode the bundle and attribute each thread's instructions to Python frames (only the
    streams numbered in `streams`, in manifest order, when given). Raises PythonHistoryError
    naming the bundle and what is wrong (no Python table: recorded without attribution)."""
    from adapter.export.trace import decoder_options
    from pt_decoder.errors import PtError
    from pt_decoder.image import Image
    from pt_decoder.insn import InsnDecoder
    try:
        bundle = Bundle.open(path)
    except BundleError as exc:
        raise PythonHistoryError(str(exc)) from None
    table = bundle.manifest.get("python")
    if not isinstance(table, dict):
        raise PythonHistoryError(f"{path}: the recording has no Python attribution (recorded "
                                 "without the Python probe, or the target ran no CPython)")
    code = Image()
    try:
        for entry in bundle.images:
            code.add_raw(str(bundle.image_path(entry)), entry["load_address"],
                         entry.get("offset", 0), entry.get("size"))
    except (PtError, OSError, KeyError) as exc:
        raise PythonHistoryError(f"{path}: cannot map the bundle's images: {exc}") from None
    options = decoder_options(bundle.manifest)
    out = []
    for number, stream in enumerate(bundle.streams):
        if streams is not None and number not in streams:
            continue
        try:
            flow = InsnDecoder(bundle.stream_bytes(stream), code, **options).decode()
        except (PtError, OSError) as exc:
            raise PythonHistoryError(f"{path}: stream {stream.get('file')}: {exc}") from None
        samples = samples_from_flow(flow.items, flow.ip)
        tid = int(stream.get("tid") or 0)
        history = flow.to_history({"tid": tid})
        try:
            frames = PythonFrames.from_manifest(table, samples, len(history))
        except (KeyError, ValueError, TypeError) as exc:
            raise PythonHistoryError(f"{path}: the manifest's Python table is damaged: "
                                     f"{exc}") from None
        history.attach_python(frames)
        out.append(ThreadPython(tid, history, samples))
    return out
