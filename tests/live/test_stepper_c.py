"""The stepper records a C program: the decoded bundle equals the independent
single-step log of the same run, the bundle survives being copied, and the
recorder stops far less often than once per instruction."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from stepper_support import (
    PTDEBUG,
    ROOT,
    build_c,
    decode_ips,
    errors_in,
    libipt_decode_ips,
    libipt_decode_records,
    reference_launched,
)

from adapter.capture import record, stepper
from adapter.capture.bundle import Bundle, validate

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def rec_work(tmp_path_factory):
    return build_c("rec_work.c", tmp_path_factory.mktemp("rec_c"))


@pytest.fixture(scope="module")
def reference(rec_work):
    return reference_launched([rec_work, "12", "2"], "work")


@pytest.fixture(scope="module")
def recorded(rec_work, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle_c") / "work.bundle"
    result = record.record_stepper(str(out), command=[str(rec_work), "12", "2"], start="work",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True)
    return out, result


def test_recorded_path_equals_single_step_reference(recorded, reference):
    out, result = recorded
    assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
    assert list(result.recording.ips) == reference
    assert len(reference) > 3000  # fixture sanity: calls, a jump table, libc, a syscall


def test_decoded_bundle_equals_single_step_reference(recorded, reference):
    out, _ = recorded
    assert validate(out) == []
    ips, events = decode_ips(out)
    assert errors_in(events) == []
    assert ips == reference


def test_reference_decoder_agrees(recorded, reference):
    """libipt, decoding the same bundle, gets the same path: the stream is real PT."""
    out, _ = recorded
    ips, errors = libipt_decode_ips(out)
    assert errors == []
    assert ips == reference


def test_decoded_time_is_monotonic_and_equals_libipt(recorded):
    """Regression: the stepper's coarse stamps (one per stop) once made the encoder's CYC
    run past the MTC edges, so the decoded time stepped back. `ptdebug decode --time`
    gives a non-decreasing time, inside the recording's span, equal to libipt's."""
    out, result = recorded
    run = subprocess.run([*PTDEBUG, "decode", str(out), "--format", "jsonl", "--time"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    times = [r["tsc"] for r in rows if "kind" not in r]
    ref = [r["tsc"] for r in libipt_decode_records(out) if r["type"] == "insn"]
    assert len(times) == len(result.recording.ips) > 3000
    assert all(a <= b for a, b in zip(times, times[1:]))
    stamps = [ns for _, ns in result.recording.stamps]
    assert min(stamps) <= times[0] < times[-1] <= max(stamps)
    assert times == ref


def test_bundle_copied_elsewhere_decodes_the_same(recorded, reference, tmp_path):
    out, _ = recorded
    copy = tmp_path / "elsewhere" / "copy.bundle"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert all(not im["file"].startswith("/") for im in manifest["images"])  # copied in
    assert decode_ips(copy)[0] == reference


def test_recorder_stops_rarely_and_steps_almost_never(recorded):
    _, result = recorded
    rec = result.recording
    assert rec.stops * 4 < len(rec.ips), (rec.stops, len(rec.ips))
    assert rec.single_steps < 20  # only system calls it cannot perform


def test_manifest_describes_the_recording(recorded):
    out, result = recorded
    m = Bundle.open(out).manifest
    assert m["backend"] == "stepper" and m["cpu"]["family"] > 0
    assert m["timing"]["tsc_hz"] == 10**9 and m["timing"]["cyc"] is True
    paths = [im["path"] for im in m["images"]]
    assert any(p.endswith("/rec_work") for p in paths)
    assert any("libc" in p for p in paths)
    exe = next(im for im in m["images"] if im["path"].endswith("/rec_work"))
    assert exe["build_id"] and len(exe["build_id"]) == 40
    assert m["stats"]["instructions"] == len(result.recording.ips)
    assert m["threads"][0]["tid"] == m["streams"][0]["tid"]


def test_record_cli_count_and_decode(rec_work, tmp_path):
    out = tmp_path / "cli.bundle"
    run = subprocess.run([*PTDEBUG, "record", "--from", "classify", "--count", "500",
                          "-o", str(out), "--", str(rec_work), "30"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "complete: 500 instructions" in run.stdout
    ips, events = decode_ips(out)
    assert len(ips) == 500 and errors_in(events) == []


def test_until_symbol_stops_before_it_runs(rec_work, reference, tmp_path):
    from pt_decoder.image import Image
    image = Image()
    image.add_elf(str(rec_work), base=0x555555554000)   # PIE at the no-ASLR base
    classify = image.find_symbol("classify")[0]
    result = record.record_stepper(str(tmp_path / "until.bundle"),
                                   command=[str(rec_work), "12", "2"], start="work",
                                   end=stepper.EndCondition(until_spec="classify"),
                                   no_aslr=True)
    assert result.manifest["status"] == "complete"
    assert result.recording.end_ip == classify
    assert list(result.recording.ips) == reference[:reference.index(classify)]


def test_code_in_anonymous_memory_is_snapshotted(tmp_path):
    """JIT-style code (an anonymous RWX page) runs inside the recording: the bundle
    carries a snapshot of that memory and decodes to the single-step path."""
    from stepper_support import PROGRAMS
    exe = tmp_path / "rec_jit"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(PROGRAMS / "rec_jit.c")], check=True)
    reference = reference_launched([exe], "run_jit")
    out = tmp_path / "jit.bundle"
    result = record.record_stepper(str(out), command=[str(exe)], start="run_jit",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True)
    assert result.manifest["status"] == "complete"
    assert list(result.recording.ips) == reference
    snapshots = [im for im in result.manifest["images"] if im["kind"] == "snapshot"]
    assert any(im["path"] == "[anon]" for im in snapshots)
    ips, events = decode_ips(out)
    assert errors_in(events) == [] and ips == reference


def test_recording_driven_from_another_thread(rec_work, reference, tmp_path):
    """The DAP server may record from a worker thread (no SIGALRM watchdog there)."""
    import threading
    results = []

    def job():
        results.append(record.record_stepper(
            str(tmp_path / "thread.bundle"), command=[str(rec_work), "12", "2"], start="work",
            end=stepper.EndCondition(until_return=True), no_aslr=True))
    worker = threading.Thread(target=job)
    worker.start()
    worker.join(120)
    assert results and list(results[0].recording.ips) == reference


def test_longjmp_abandoned_frames(tmp_path):
    """longjmp leaves calls on the recorder's shadow stack whose returns never
    run: the stack-slot check keeps it from predicting returns into them."""
    from stepper_support import PROGRAMS
    exe = tmp_path / "rec_longjmp"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(PROGRAMS / "rec_longjmp.c")], check=True)
    reference = reference_launched([exe], "escape")
    result = record.record_stepper(str(tmp_path / "lj.bundle"), command=[str(exe)],
                                   start="escape", end=stepper.EndCondition(until_return=True),
                                   no_aslr=True)
    assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
    assert list(result.recording.ips) == reference
    assert decode_ips(tmp_path / "lj.bundle")[0] == reference


@pytest.mark.parametrize("breakpoints", ["int3", "dr"])
def test_count_is_exact(rec_work, reference, tmp_path, breakpoints):
    """--count N records exactly the first N instructions, whichever breakpoints."""
    for n in (1, 7, 1000, len(reference) - 5):
        result = record.record_stepper(str(tmp_path / f"n{n}"), command=[str(rec_work), "12", "2"],
                                       start="work", end=stepper.EndCondition(count=n),
                                       no_aslr=True, breakpoints=breakpoints)
        assert list(result.recording.ips) == reference[:n]
        assert result.recording.end_ip == reference[n]
