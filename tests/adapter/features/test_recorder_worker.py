"""The adapter's side of a warm recorder process (adapter/features/recorder_worker.py), with a
real worker process."""
from __future__ import annotations

from adapter.features.recorder_worker import RecorderWorker


def test_error_text_after_the_session_closed_the_worker():
    """The DAP fuzzer (seed 365648493): debugpy went away while a capture was opening, the
    session closed its workers, and the capture's clean-up asked the closed worker why it
    failed: ValueError on the closed stderr file, a traceback in place of the user's message."""
    worker = RecorderWorker()
    worker.wait_ready()
    worker.close()
    assert worker.error_text() == "the recorder exited with 0"
