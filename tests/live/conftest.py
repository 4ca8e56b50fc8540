"""Fixtures the live tests share: the C programs several of them record, built once a run."""
from __future__ import annotations

import pytest
from stepper_support import build_c


@pytest.fixture(scope="session")
def rec_checksum(tmp_path_factory):
    """tests/fixtures/programs/rec_checksum.c (prints a checksum of its rounds; argv: rounds,
    sleep per round in microseconds), built with gcc -O1 -g."""
    return build_c("rec_checksum.c", tmp_path_factory.mktemp("rec_checksum"))
