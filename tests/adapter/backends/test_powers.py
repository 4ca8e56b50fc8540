"""Which backend declares which optional power (adapter/powers.py): the features
decide on these, never on a backend's name, so a backend that lost a method by a rename would
silently lose a feature; this says which each must have."""
from __future__ import annotations

import pytest

from adapter.backends import create_backend
from adapter.powers import (
    HandsOverThreads,
    ReplaysRecordings,
    RunsInsidePython,
    ServesCustomRequests,
    ServesDataBreakpoints,
    ServesInstructionBreakpoints,
    ShowsOriginalBytes,
    records,
)

POWERS = (RunsInsidePython, HandsOverThreads, ServesDataBreakpoints,
          ServesInstructionBreakpoints, ShowsOriginalBytes, ServesCustomRequests,
          ReplaysRecordings)


class _Hooks:
    pass


@pytest.mark.parametrize("backend, expected, recording", [
    ("python", {RunsInsidePython}, True),
    ("go", {HandsOverThreads, ServesDataBreakpoints, ServesInstructionBreakpoints,
            ShowsOriginalBytes, ServesCustomRequests}, True),
    ("replay", {ReplaysRecordings}, False),
])
def test_each_backend_declares_its_powers(backend, expected, recording):
    made = create_backend(backend, _Hooks())
    assert {power for power in POWERS if isinstance(made, power)} == expected
    assert records(made) is recording


def test_delve_custom_requests_are_its_goroutine_list_only():
    """ptdebug/goroutineHistory reads a bundle, not the program: a feature of every session
    (features/goroutine_view.py), no longer special-cased in DelveBackend.forward."""
    assert set(create_backend("go", _Hooks()).custom_requests()) == {"ptdebug/goroutines"}
