"""adapter/capture/oom_shield.py: while a recording traces a thread, the recorder's
oom_score_adj is -1000, or -999 where -1000 is refused (the OOM killer, which would SIGKILL it
and so kill the recorded program with its pending SIGTRAP, picks another process), and its
earlier value comes back when the recording ends, also one that failed.

What a process may set depends on where it runs: this VM runs tests as root without
CAP_SYS_RESOURCE, where the lowest value allowed is the one inherited (seen as 0, and as -999,
from one shell to the next). `_lowest_allowed` asks a forked child first; where nothing can be
lowered the recording must go on, say so in its log, and leave the value alone."""
from __future__ import annotations

import os

import pytest
from stepper_support import build_c

from adapter.capture import record, stepper
from adapter.capture.oom_shield import OOM_SCORE_ADJ, shielded_from_oom_killer

pytestmark = pytest.mark.live


def _adj() -> int:
    with open(OOM_SCORE_ADJ) as f:
        return int(f.read())


@pytest.fixture
def earlier_value():
    """This process at oom_score_adj 200 for the test (a value the shield must put back)."""
    with open(OOM_SCORE_ADJ) as f:
        saved = f.read().strip()
    with open(OOM_SCORE_ADJ, "w") as f:
        f.write("200")
    yield 200
    with open(OOM_SCORE_ADJ, "w") as f:
        f.write(saved)


def _lowest_allowed() -> int | None:
    """What the shield can reach in this process: tried in a forked child (the limit, the
    inherited oom_score_adj_min, is the same there)."""
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child tries, says which, and exits
        reached = b"none"
        for value in (-1000, -999):
            try:
                with open(OOM_SCORE_ADJ, "w") as f:
                    f.write(str(value))
            except OSError:
                continue
            reached = str(value).encode()
            break
        os.write(write_fd, reached)
        os._exit(0)
    os.close(write_fd)
    answer = os.read(read_fd, 16)
    os.close(read_fd)
    os.waitpid(child, 0)
    return None if answer == b"none" else int(answer)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_c("rec_checksum.c", tmp_path_factory.mktemp("oom"))


def test_the_shield_sets_the_minimum_and_puts_the_earlier_value_back(earlier_value):
    lowest = _lowest_allowed()
    said = []
    with shielded_from_oom_killer(said.append) as shielded:
        assert shielded == lowest
        assert _adj() == (earlier_value if lowest is None else lowest)
    assert _adj() == earlier_value
    assert bool(said) == (lowest is None), said  # the user hears when it could not


def test_a_recording_is_shielded_while_it_traces_and_not_after(program, tmp_path,
                                                              earlier_value):
    lowest = _lowest_allowed()
    seen = {}
    with open(tmp_path / "out.txt", "w") as out:
        record.record_stepper(str(tmp_path / "b"), command=[str(program), "2000", "0"],
                              start="step", end=stepper.EndCondition(count=2_000),
                              breakpoints="dr", output_fd=out.fileno(),
                              stage=lambda name: seen.setdefault(name, _adj()))
    shielded = earlier_value if lowest is None else lowest
    assert seen["thread held"] == seen["target released"] == shielded, seen
    assert _adj() == earlier_value


def test_a_failed_recording_puts_the_earlier_value_back(program, tmp_path, earlier_value):
    with pytest.raises(record.RecordFailed):
        record.record_stepper(str(tmp_path / "b"), command=[str(program), "2000", "0"],
                              start="no_such_function", end=stepper.EndCondition(count=10))
    assert _adj() == earlier_value
