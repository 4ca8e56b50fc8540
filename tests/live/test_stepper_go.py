"""The stepper records a Go program (many runtime threads; the trigger is
armed in each of them as they are created): the decoded bundle equals the
independent single-step log of the same run."""
from __future__ import annotations

import os

import pytest
from stepper_support import build_go, decode_ips, errors_in, libipt_decode_ips, reference_launched

from adapter.capture import record, stepper

pytestmark = pytest.mark.live

# No asynchronous preemption signal may land in one run and not the other.
GO_ENV = dict(os.environ, GODEBUG="asyncpreemptoff=1")


@pytest.fixture(scope="module")
def rec_work_go(tmp_path_factory):
    return build_go("rec_work.go", tmp_path_factory.mktemp("rec_go"))


def test_go_recording_equals_single_step_reference(rec_work_go, tmp_path):
    reference = reference_launched([rec_work_go], "main.work", env=GO_ENV)
    out = tmp_path / "go.bundle"
    result = record.record_stepper(str(out), command=[str(rec_work_go)], start="main.work",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True,
                                   env=GO_ENV)
    assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
    assert result.target_exit == 0
    assert len(reference) > 1000
    assert list(result.recording.ips) == reference
    ips, events = decode_ips(out)
    assert errors_in(events) == []
    assert ips == reference
    assert libipt_decode_ips(out) == (reference, [])
    # interface calls are indirect: the recorder performed them without single steps
    assert result.recording.single_steps == 0
    assert result.recording.stops * 3 < len(reference)


def test_go_recording_keeps_the_goroutine_through_preemption(rec_work_go, tmp_path):
    """Issue 14: without GODEBUG=asyncpreemptoff=1 the slowed goroutine was asked to yield
    (SIGURG, runtime.asyncPreempt) and the recording lost it after a few dozen instructions.
    With the goroutine held on its thread for the window (adapter/golang/recording.py) the
    recording is complete and its flow is the one single-stepped with preemption off."""
    reference = reference_launched([rec_work_go], "main.work", env=GO_ENV)
    env = {k: v for k, v in os.environ.items() if k != "GODEBUG"}
    out = tmp_path / "preempted.bundle"
    result = record.record_stepper(str(out), command=[str(rec_work_go)], start="main.work",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True,
                                   env=env)
    assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
    assert result.target_exit == 0
    assert list(result.recording.ips) == reference
    assert result.manifest["go"]["goroutines"] == "goroutine 1 throughout"


def test_go_cli_recording_is_complete_without_godebug(rec_work_go, tmp_path):
    """The issue's command line: `ptdebug record --from main.work --until-return -- ./prog`."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "GODEBUG"}
    done = subprocess.run([sys.executable, "-m", "adapter.cli", "record", "--from", "main.work",
                           "--until-return", "-o", str(tmp_path / "cli.bundle"), "--",
                           str(rec_work_go)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "complete:" in done.stdout + done.stderr
