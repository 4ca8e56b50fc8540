"""Bad input for the packet layer: random bytes, truncated and bit-flipped real traces.

Properties: the decoder never crashes, never hangs (every loop here is
bounded and pytest-timeout backs it), never reads outside the buffer (a
guard-page run in a child process would die of SIGSEGV), every error names
an offset inside the buffer, and after an error sync_forward() lands on a
PSB at or after the bad spot (at most 15 bytes back: a partly swallowed PSB).

CI runs a bounded number of examples (a few seconds). A longer run:
    PTDEBUG_FUZZ_EXAMPLES=20000 PTDEBUG_FUZZ_ROUNDS=200000 \
        .venv/bin/pytest tests/pt_decoder/test_packet_fuzz.py -p no:cacheprovider
(see docs/decoding.md).
"""
from __future__ import annotations

import functools
import os
import pathlib
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pt_decoder.errors import ErrorCode, PtError
from pt_decoder.packet import RECORD_FIELDS, RECORD_FORMAT, Kind, PacketDecoder

EXAMPLES = int(os.environ.get("PTDEBUG_FUZZ_EXAMPLES", "100"))
ROUNDS = int(os.environ.get("PTDEBUG_FUZZ_ROUNDS", "3000"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PSB = bytes([0x02, 0x82] * 8)
_ROOT = pathlib.Path(__file__).resolve().parents[2]
_TRACES = pathlib.Path(os.environ.get("PTDEBUG_SHARED", _ROOT.parent / "shared")) / "traces"
REAL_TRACES = sorted(
    [p for p in _TRACES.glob("dynamorio-drpt2trace/*/pt.bin")]
    + [_TRACES / "lldb-intelpt/intelpt-trace/3842849.trace", _TRACES / "synthetic-oracle/work.pt"])
REAL_TRACES = [p for p in REAL_TRACES if p.is_file()]
_DATA = {p.name + p.parent.name: p.read_bytes() for p in REAL_TRACES}
NO_TRACES = f"shared traces not found under {_TRACES} (set PTDEBUG_SHARED)"

# Fragments that make random streams reach deep into the decoder: valid
# packets of every kind, PSBs, and their cut-off starts.
SNIPPETS = [
    PSB, bytes([0x02, 0x23]), bytes([0x00]), bytes([0x02, 0xF3]), bytes([0x16]),
    bytes([0x02, 0xA3, 1, 2, 3, 4, 5, 6]), bytes([0xCD]) + bytes(8), bytes([0x2D, 1, 2]),
    bytes([0x4D, 1, 2, 3, 4]), bytes([0x71, 1, 2, 3, 4, 5, 6]), bytes([0x91, 1, 2, 3, 4, 5, 6]),
    bytes([0x1D]), bytes([0x99, 0x01]), bytes([0x99, 0x21]), bytes([0x02, 0x43, 1, 2, 3, 4, 5, 6]),
    bytes([0x19, 1, 2, 3, 4, 5, 6, 7]), bytes([0x02, 0x73, 1, 2, 0, 3, 0]), bytes([0x59, 9]),
    bytes([0x07, 0x81, 0x00]), bytes([0x02, 0x03, 5, 0]), bytes([0x02, 0xC8, 1, 2, 3, 4, 5]),
    bytes([0x02, 0x83]), bytes([0x02, 0xC3, 0x88]) + bytes(8), bytes([0x02, 0x62]),
    bytes([0x02, 0xC2]) + bytes(8), bytes([0x02, 0x22, 0, 0]), bytes([0x02, 0xA2]) + bytes(5),
    bytes([0x02, 0x92, 1, 2, 3, 4]), bytes([0x02, 0x63, 0x80]), bytes([0x0C, 1, 2, 3, 4]),
    bytes([0x02, 0x33]), bytes([0x02, 0x13, 1, 2]), bytes([0x02, 0x53]) + bytes(9),
    bytes([0xD9, 0x40, 1, 2, 3]), bytes([0x02]), bytes([0x02, 0xC3]),
]


def check_stream(data, **kw):
    """Decode like ptdump (resync after each error) and check every invariant.
    Returns (packets, errors)."""
    n = len(data)
    dec = PacketDecoder(data, **kw)
    packets, errors = [], []
    last_sync = -1
    if dec.sync_forward() is None:
        assert dec.count() == (0, 0)
        return packets, errors
    expected_next = dec.offset
    budget = 2 * n + 64                 # more steps than this would be a hang
    while budget:
        budget -= 1
        try:
            pkt = dec.next()
        except PtError as exc:
            assert exc.offset is not None and 0 <= exc.offset < n, exc
            assert exc.offset == expected_next, "an error not at the next packet boundary"
            assert f"{exc.offset:#x}" in str(exc)
            if exc.code == ErrorCode.EOS:
                assert "truncated" in exc.detail
            else:
                assert exc.code in (ErrorCode.BAD_OPC, ErrorCode.BAD_PACKET)
            errors.append(exc)
            sync = dec.sync_forward()
            if sync is None:
                break
            # A PSB at or after the bad spot, or one it partly swallowed.
            assert sync >= exc.offset - 15 and sync > last_sync
            assert bytes(data[sync:sync + 16]) == PSB
            last_sync = sync
            expected_next = sync
            continue
        if pkt is None:
            assert expected_next == n
            break
        assert pkt.offset == expected_next and pkt.size >= 1 and pkt.end <= n
        assert pkt.kind != Kind.INVALID or (kw.get("errata_skz84") and pkt.size == 8)
        expected_next = pkt.end
        packets.append(pkt)
    assert budget, "decoder did not finish: hang"
    fast = PacketDecoder(data, **kw)
    assert fast.count() == (len(packets), len(errors))
    kind_errors: list = []
    assert PacketDecoder(data, **kw).kinds(kind_errors) == bytes(p.kind_id for p in packets)
    assert [(e.code, e.offset) for e in kind_errors] == [(e.code, e.offset) for e in errors]
    records: list = []
    assert (PacketDecoder(data, **kw).records(records)
            == b"".join(struct.pack(RECORD_FORMAT, *(getattr(p, f if f != "kind" else "kind_id")
                                                     for f in RECORD_FIELDS)) for p in packets))
    return packets, errors


@functools.cache
def full_decode(name):
    return check_stream(_DATA[name])


@FUZZ
@given(st.binary(max_size=600), st.booleans())
def test_random_bytes_never_crash_or_hang(data, sdm):
    check_stream(data, sdm_packets=sdm)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(SNIPPETS), st.binary(max_size=12)), max_size=60),
       st.booleans())
def test_random_packet_soup_never_crash_or_hang(parts, sdm):
    check_stream(b"".join(parts), sdm_packets=sdm, errata_skz84=sdm)


@pytest.mark.skipif(not REAL_TRACES, reason=NO_TRACES)
@FUZZ
@given(st.sampled_from(sorted(_DATA)), st.data())
def test_truncated_real_traces_lose_only_the_cut_packet(name, draw):
    data = _DATA[name]
    full, full_errors = full_decode(name)
    assert not full_errors
    cut = draw.draw(st.integers(min_value=0, max_value=len(data)))
    packets, errors = check_stream(memoryview(data)[:cut])
    assert packets == [p for p in full if p.end <= cut]
    assert len(errors) <= 1
    if errors:
        assert errors[0].code == ErrorCode.EOS
        assert errors[0].offset == min(p.offset for p in full if p.end > cut)


@pytest.mark.skipif(not REAL_TRACES, reason=NO_TRACES)
@FUZZ
@given(st.sampled_from(sorted(_DATA)), st.data())
def test_bit_flipped_real_traces_never_crash_and_resync(name, draw):
    data = bytearray(_DATA[name])
    flips = draw.draw(st.lists(st.integers(0, len(data) * 8 - 1), min_size=1, max_size=16))
    for bit in flips:
        data[bit // 8] ^= 1 << (bit % 8)
    packets, _errors = check_stream(bytes(data))
    # Damage stays local: every PSB after the last flipped byte is still found.
    last_flip = max(flips) // 8
    later_psbs = [p.offset for p in full_decode(name)[0]
                  if p.kind == Kind.PSB and p.offset > last_flip + 16]
    found = {p.offset for p in packets if p.kind == Kind.PSB}
    assert set(later_psbs) <= found


@pytest.mark.skipif(not REAL_TRACES, reason=NO_TRACES)
def test_real_traces_decode_without_errors():
    for data in _DATA.values():
        packets, errors = check_stream(data)
        assert packets and not errors


# ---- no read outside the buffer: guard pages in a child process ---------------

_GUARD_SCRIPT = r"""
import ctypes, mmap, os, random, sys
from pt_decoder.packet import PacketDecoder
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE
# Three pages: [guard][data][guard]; the data page is the only readable one.
m = mmap.mmap(-1, 3 * PAGE)
base = ctypes.addressof(ctypes.c_char.from_buffer(m))
for page in (0, 2):
    assert libc.mprotect(base + page * PAGE, PAGE, 0) == 0, ctypes.get_errno()
rng = random.Random(int(sys.argv[1]))
traces = [open(p, "rb").read() for p in sys.argv[3:]]
psb = bytes([2, 0x82] * 8)
for i in range(int(sys.argv[2])):
    kind = i % 3
    if kind == 0:
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
    elif kind == 1:
        data = b"".join(rng.choice([psb, bytes([2]), bytes([0x02, 0xc3]), bytes([0xcd]),
                                    bytes([7, 0x81]), bytes([0x19, 1]), os.urandom(3)])
                        for _ in range(rng.randint(0, 40)))
    else:
        t = rng.choice(traces) if traces else psb * 4
        start = rng.randrange(len(t))
        data = bytearray(t[start:start + rng.randint(1, PAGE)])
        for _ in range(rng.randint(0, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        data = bytes(data)
    data = data[:PAGE]
    for at_end in (True, False):       # buffer ends at the upper guard / starts at the lower one
        lo = 2 * PAGE - len(data) if at_end else PAGE
        m[lo:lo + len(data)] = data
        view = memoryview(m)[lo:lo + len(data)]
        dec = PacketDecoder(view, sdm_packets=bool(i & 1), errata_skz84=bool(i & 2))
        dec.count()
        PacketDecoder(view).kinds([])
        PacketDecoder(view).records([])
        d = PacketDecoder(view)
        while d.sync_backward() is not None:
            pass
        errors = []
        PacketDecoder(view).decode_all(errors)
        del dec, d, view
print("ok", int(sys.argv[2]))
"""


def test_no_read_outside_the_buffer_guard_pages():
    res = subprocess.run([sys.executable, "-c", _GUARD_SCRIPT, "1", str(ROUNDS),
                          *map(str, REAL_TRACES)],
                         check=False, capture_output=True, text=True, timeout=600, cwd=_ROOT)
    assert res.returncode == 0, (f"decoder child died (signal {-res.returncode} means an "
                                 f"out-of-bounds read):\n{res.stderr[-3000:]}")
    assert res.stdout.split() == ["ok", str(ROUNDS)]
