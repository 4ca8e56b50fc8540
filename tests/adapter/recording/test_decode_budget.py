"""A recording too large to decode whole is refused before it exhausts memory, with a message
saying so, on a real recorded bundle (recorded_bundles.c_bundle: a stepper recording of a C
program); within the budget it opens as before."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from recorded_bundles import REQUESTS, c_bundle, c_program, ptdebug  # noqa: F401

from adapter.recording import recording as recording_module
from adapter.recording.recording import Recording, TraceError


def test_more_instructions_than_memory_allows_is_refused_plainly(c_bundle, monkeypatch):
    whole = Recording.open(c_bundle)
    total = whole.total_instructions
    assert total > 1000
    monkeypatch.setattr(recording_module, "decode_budget", lambda: total - 1)
    with pytest.raises(TraceError, match=r"more instructions than this machine's free memory "
                                         r"can hold decoded \(about [\d,]+ instructions"):
        Recording.open(c_bundle)
    monkeypatch.setattr(recording_module, "decode_budget", lambda: total)
    assert Recording.open(c_bundle).total_instructions == total  # exactly the budget: opens


def test_the_budget_follows_the_memory_available():
    budget = recording_module.decode_budget()
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f
                         if line.startswith("MemAvailable:"))
    per = recording_module.DECODED_BYTES_PER_INSTRUCTION
    assert budget == pytest.approx(available * 3 // 4 // per, rel=0.2)


@pytest.fixture(scope="module")
def long_bundle(c_program, tmp_path_factory):
    """A stepper recording of the C program's first 100,000 instructions (the dynamic loader
    and its requests): a stream of many PSBs (the stepper writes one every 4 KiB)."""
    bundle = tmp_path_factory.mktemp("long") / "bundle"
    ptdebug("record", "--backend", "stepper", "--count", "100000", "-o", str(bundle), "--",
            str(c_program), str(REQUESTS))
    return bundle


def test_a_stream_too_long_to_decode_whole_is_loaded_from_its_end(long_bundle, tmp_path,
                                                                  monkeypatch, capsys):
    """The last part of a long stream is loaded (its PSB index built once and kept in the
    bundle), marked as such, and equal to the same instructions of the whole decode."""
    import shutil

    from pt_decoder import chunked
    bundle = tmp_path / "bundle"
    shutil.copytree(long_bundle, bundle)
    whole = Recording.open(bundle).threads[0]
    total = len(whole.history)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(recording_module, "MAX_WHOLE_INSTRUCTIONS", total // 2)
    monkeypatch.setattr(recording_module, "TAIL_INSTRUCTIONS", total // 3)
    monkeypatch.setattr(recording_module, "MIN_TAIL_INSTRUCTIONS", 10)
    opened = Recording.open_for_command(bundle, "export")
    (thread,) = opened.threads
    first = thread.loaded_from
    assert first > 0 and total - first <= total // 3 and thread.recorded == total
    assert list(thread.history.ips()) == list(whole.history.ips(first))
    assert list(thread.history.times()) == list(whole.history.times(first))
    (note,) = opened.notes
    assert f"{total:,} instructions were recorded" in note
    assert f"from instruction {first:,}" in note
    assert f"ptdebug export: note: {note}" in capsys.readouterr().err
    assert list((bundle / "index").glob("*.chunks.json"))  # kept for the next open

    def not_again(*args, **kwargs):
        raise AssertionError("the kept index was built again")
    monkeypatch.setattr(chunked.StreamIndex, "build", not_again)
    again = Recording.open(bundle).threads[0]
    assert again.loaded_from == first and len(again.history) == len(thread.history)


@pytest.mark.parametrize("value", ["many", "0", "-5"])
def test_a_bad_whole_decode_limit_is_named(c_bundle, monkeypatch, value):
    monkeypatch.setenv("PTDEBUG_WHOLE_DECODE_LIMIT", value)
    with pytest.raises(TraceError, match=rf"PTDEBUG_WHOLE_DECODE_LIMIT='{value}': not a "
                                         r"positive number of instructions"):
        Recording.open(c_bundle)


def test_streams_counted_ahead_are_not_counted_at_open(long_bundle, tmp_path, monkeypatch):
    """index_streams (what `ptdebug import` runs for a long stream) keeps the index that a
    later open of a stream too long to decode whole uses."""
    import shutil

    from pt_decoder import chunked
    bundle = tmp_path / "bundle"
    shutil.copytree(long_bundle, bundle)
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 4096)
    (counted,) = recording_module.index_streams(bundle, at_bytes=0)
    whole = Recording.open(bundle).threads[0]
    assert counted[1] == len(whole.history)

    def not_again(*args, **kwargs):
        raise AssertionError("the stream was counted again")
    monkeypatch.setattr(chunked.StreamIndex, "build", not_again)
    monkeypatch.setattr(recording_module, "MAX_WHOLE_INSTRUCTIONS", counted[1] // 2)
    opened = Recording.open(bundle)
    assert opened.threads[0].loaded_from > 0 and opened.threads[0].recorded == counted[1]


def test_counting_a_bundle_that_is_not_there_says_so(tmp_path):
    with pytest.raises(TraceError, match="cannot count its streams"):
        recording_module.index_streams(tmp_path / "nothing")
