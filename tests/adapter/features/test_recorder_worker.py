"""The adapter's side of a warm recorder process (adapter/features/recorder_worker.py), with a
real worker process."""
from __future__ import annotations

import pytest

from adapter.features.recorder_worker import RecorderWorker


def test_error_text_after_the_session_closed_the_worker():
    """The DAP fuzzer (seed 365648493): debugpy went away while a capture was opening, the
    session closed its workers, and the capture's clean-up asked the closed worker why it
    failed: ValueError on the closed stderr file, a traceback in place of the user's message."""
    worker = RecorderWorker()
    worker.wait_ready()
    worker.close()
    assert worker.error_text() == "the recorder exited with 0"


def test_a_worker_stopped_while_it_starts_says_so_not_its_traceback():
    """The DAP fuzzer (seed 2585717861): a recording stopped while its worker still imported
    the recorder; stop()'s SIGINT gave a KeyboardInterrupt traceback in the worker's stderr,
    which became the user's message ("did not start: ... KeyboardInterrupt")."""
    worker = RecorderWorker()
    worker.stop()  # microseconds after the start: it is still starting Python or importing
    try:
        with pytest.raises(RuntimeError) as raised:
            worker.wait_ready()
        assert str(raised.value) == ("the recording was stopped before its recorder process "
                                     "was ready")
    finally:
        worker.close()
