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
    from adapter.export.trace import StreamDecodeError, decode_stream_flows
    try:
        bundle = Bundle.open(path)
    except BundleError as exc:
        raise PythonHistoryError(str(exc)) from None
    table = bundle.manifest.get("python")
    if not isinstance(table, dict):
        raise PythonHistoryError(f"{path}: the recording has no Python attribution (recorded "
                                 "without the Python probe, or the target ran no CPython)")
    out = []
    try:
        for _number, tid, flow in decode_stream_flows(bundle, streams):
            samples = samples_from_flow(flow.items, flow.ip)
            history = flow.to_history({"tid": tid})
            try:
                frames = PythonFrames.from_manifest(table, samples, len(history))
            except (KeyError, ValueError, TypeError) as exc:
                raise PythonHistoryError(f"{path}: the manifest's Python table is damaged: "
                                         f"{exc}") from None
            history.attach_python(frames)
            out.append(ThreadPython(tid, history, samples))
    except StreamDecodeError as exc:
        raise PythonHistoryError(str(exc)) from None
    return out
