"""Go captures in the debugger's views (adapter/features/goroutine_view.py): what it costs to
show time per goroutine and the goroutine at the replay cursor, on a capture of 5 million
instructions, beside what the capture already costs.

A real stepper recording of tests/fixtures/programs/go_handoff (three goroutines handing a
token over channels, the goid probe writing PTWRITEs) is made once (bench_goroutines'
recorder). Measured side by side in one run:

* building a capture's goroutine index (Recording.goroutines on first use: from the PTWRITE
  goids its decode kept, the runtime layout already read, as for every capture after a
  session's first), against decoding the same bundle (Recording.open), best of 5;
* on 5 M instructions (1 M with --quick): the recording's columns repeated, its goid
  observations with them, the History built from them (History.from_columns, the reference)
  and the index (GoroutineIndex.build); then the first expansion of the trace scope's
  "goroutines" item (per-goroutine instructions, times, cycles over the whole window), the
  trace scope of a replay stop once that is known, a `threads` answer renamed while
  replaying, and a replay stop's goroutine note.

    .venv/bin/python -m benchmarks.bench_goroutine_view [--quick] [--json]
"""
from __future__ import annotations

import json
import sys
import tempfile
import time

from benchmarks.bench_goroutines import _record_handoff


def _best(fn, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class _Recording:
    """The trace scope's variablesReference table (RecordBreakpoints.reference)."""

    def __init__(self):
        self.produce = {}

    def reference(self, produce) -> int:
        self.produce[len(self.produce) + 1] = produce
        return len(self.produce)


def bench_capture_index(bundle: str, binary: str) -> dict:
    from adapter.golang.runtime_layout import RuntimeLayout, layout_of
    from adapter.recording.goroutines import index_threads
    from adapter.recording.recording import Recording
    layout_s = _best(lambda: RuntimeLayout.from_elf(binary), rounds=1)
    layout_of(binary)
    trace = Recording.open(bundle)
    decode_s = _best(lambda: Recording.open(bundle))
    # what Recording.goroutines() does on first use (it keeps the result)
    build_s = _best(lambda: index_threads(trace.root, trace.manifest, trace.threads))
    return {"instructions": len(trace.threads[0].history), "decode_s": round(decode_s, 4),
            "goroutine_index_s": round(build_s, 4),
            "index_vs_decode": round(build_s / decode_s, 2),
            "runtime_layout_first_read_s": round(layout_s, 3)}


def bench_views(instructions: int, bundle: str) -> dict:
    import numpy as np

    from adapter.capture.bundle import Bundle
    from adapter.features import goroutine_view, trace_scope
    from adapter.features.captures import Capture
    from adapter.features.record_window import RecordWindow
    from adapter.golang.goroutine_index import GoroutineIndex
    from adapter.golang.runtime_layout import layout_of
    from adapter.recording.goroutines import go_binary
    from adapter.recording.recording import Recording
    from pt_decoder.history import History

    (thread,) = Recording.open(bundle).goroutines().values()
    base = thread.history
    n0 = len(base)
    copies = -(-instructions // n0)
    ip = np.tile(np.frombuffer(base.ips(), dtype=np.uint64), copies)[:instructions].copy()
    flags = np.tile(np.frombuffer(base.flags_range(), dtype=np.uint8), copies)[:instructions]
    times0 = np.frombuffer(base.times(), dtype=np.uint64).astype(np.int64)
    cycles0 = np.frombuffer(base.cycles_range(), dtype=np.uint64).astype(np.int64)
    span_t = int(times0[-1] - times0[0]) + 1
    span_c = int(cycles0[-1] - cycles0[0]) + 1
    k = np.repeat(np.arange(copies, dtype=np.int64), n0)[:instructions]
    times = (np.tile(times0, copies)[:instructions] + k * span_t).astype(np.uint64)
    cycles = (np.tile(cycles0, copies)[:instructions] + k * span_c).astype(np.uint64)
    samples = [(p + c * n0, v) for c in range(copies) for p, v in thread.samples
               if p + c * n0 < instructions]
    history_s = _best(lambda: History.from_columns(ip, times, cycles, flags), rounds=3)
    history = History.from_columns(ip, times, cycles, flags)
    layout = layout_of(go_binary(Bundle.open(bundle)))
    index = GoroutineIndex.build(ip, samples, layout.g_stores)

    trace = Recording.open(bundle)
    trace.threads[0].history = history
    capture = Capture(1, trace.threads[0].tid, 1, RecordWindow(), bundle, trace)
    _ = capture.lines  # read once, as the first stop of a session does
    recording = _Recording()

    def first_expansion():
        view = goroutine_view.CaptureGoroutines(index, len(samples))
        capture._goroutines = (view,)
        variables = goroutine_view.scope_variables(recording, capture, instructions // 2)
        return recording.produce[variables[1]["variablesReference"]]()
    expansion_s = _best(first_expansion, rounds=3)
    listed = first_expansion()
    position = instructions // 2
    scope_s = _best(lambda: trace_scope.scope_variables(recording, capture, position))
    scope_alone_s = _best(lambda: _scope_without_goroutines(recording, capture, position))

    owner = 1
    cursors = {owner: (capture, position, *index.goid_at(position))}
    threads = [{"id": g, "name": f"[Go {g}] main.relay"} for g in index.goroutines() if g > 0]
    rename_s = _best(lambda: goroutine_view.rename_threads([dict(t) for t in threads],
                                                          cursors), rounds=50)
    note_s = _best(lambda: goroutine_view.switch_note(capture, position - 1, position),
                   rounds=50)
    return {"instructions": instructions, "goroutines": len(listed),
            "segments": int(index.starts.size),
            "history_from_columns_s": round(history_s, 3),
            "goroutines_item_first_expansion_s": round(expansion_s, 3),
            "expansion_vs_history": round(expansion_s / history_s, 3),
            "trace_scope_at_a_replay_stop_ms": round(scope_s * 1e3, 2),
            "trace_scope_without_goroutine_items_ms": round(scope_alone_s * 1e3, 2),
            "threads_rename_us": round(rename_s * 1e6, 1),
            "stop_note_us": round(note_s * 1e6, 1)}


def _scope_without_goroutines(recording, capture, position):
    from adapter.features import goroutine_view, trace_scope
    saved = goroutine_view.capture_goroutines
    goroutine_view.capture_goroutines = lambda c: None
    try:
        return trace_scope.scope_variables(recording, capture, position)
    finally:
        goroutine_view.capture_goroutines = saved


def run(quick: bool = False) -> dict:
    instructions = 1_000_000 if quick else 5_000_000
    with tempfile.TemporaryDirectory(prefix="bench_goroutine_view_") as tmp:
        bundle, binary = _record_handoff(tmp)
        return {"capture_index": bench_capture_index(bundle, binary),
                "views": bench_views(instructions, bundle)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    result = run(quick="--quick" in argv)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
