"""A recording too large to decode whole is refused before it exhausts memory, with a message
saying so, on a real recorded bundle (recorded_bundles.c_bundle: a stepper recording of a C
program); within the budget it opens as before."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from recorded_bundles import c_bundle, c_program  # noqa: F401

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
