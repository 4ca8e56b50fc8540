"""A decode's progress and its cancel, on a real recorded bundle: Recording.open reports
through a protocol/progress.py Progress, a client that did not ask for progress gets no event,
one that did gets progressStart .. progressEnd (once the work passed the delay), and a cancel
by progressId stops the decode at its next report with an error that says so."""
from __future__ import annotations

import pytest
from recorded_bundles import c_bundle, c_program  # noqa: F401

from adapter.protocol import progress as progress_module
from adapter.protocol.progress import Cancelled, ProgressReporter
from adapter.recording.recording import Recording


def _reporter(supported: bool) -> tuple[ProgressReporter, list]:
    sent: list = []
    reporter = ProgressReporter(lambda event, body: sent.append((event, body)))
    reporter.supported = supported
    return reporter, sent


def test_events_go_only_to_a_client_that_asked(c_bundle, monkeypatch):
    monkeypatch.setenv("PTDEBUG_PROGRESS_DELAY", "0")
    reporter, sent = _reporter(False)
    with reporter.start("decoding") as progress:
        Recording.open(c_bundle, progress)
    assert sent == []
    reporter, sent = _reporter(True)
    with reporter.start("decoding") as progress:
        trace = Recording.open(c_bundle, progress)
    assert trace.threads and len(trace.threads[0].history) > 1000
    events = [event for event, _ in sent]
    assert events[0] == "progressStart" and events[-1] == "progressEnd", events
    assert set(events[1:-1]) <= {"progressUpdate"}
    ids = {body["progressId"] for _, body in sent}
    assert len(ids) == 1
    start = sent[0][1]
    assert start["title"] == "decoding" and start["cancellable"] is True
    assert 0 <= start["percentage"] <= 100


def test_quick_work_shows_nothing(c_bundle, monkeypatch):
    monkeypatch.setattr(progress_module, "DELAY", 60.0)
    monkeypatch.delenv("PTDEBUG_PROGRESS_DELAY", raising=False)
    reporter, sent = _reporter(True)
    with reporter.start("decoding") as progress:
        Recording.open(c_bundle, progress)
    assert sent == []


def test_a_cancel_stops_the_decode_and_ends_the_progress(c_bundle, monkeypatch):
    monkeypatch.setenv("PTDEBUG_PROGRESS_DELAY", "0")
    reporter, sent = _reporter(True)
    with pytest.raises(Cancelled, match="decoding capture 3: cancelled by the client"):
        with reporter.start("decoding capture 3") as progress:
            progress("starting", 0.0)
            assert reporter.cancel(progress.id) is True
            Recording.open(c_bundle, progress)
    assert [event for event, _ in sent] == ["progressStart", "progressEnd"]
    assert sent[-1][1]["message"] == "cancelled"
    assert reporter.cancel(progress.id) is False  # over: nothing left to cancel
