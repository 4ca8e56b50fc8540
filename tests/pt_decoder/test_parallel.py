"""Parallel decode (pt_decoder.parallel) equals the serial decode exactly.

Layer: tests of pt_decoder.parallel over insn.pyx. The stream is H2's
benchmark recipe at a small size (the static-glibc hello's real path,
re-encoded with timing packets, CYC, return compression and a PSB+ every
4 KiB), cut into PSB-aligned pieces decoded on threads and on processes.
Every column (IP, TSC, cycles, flags) and every item must be identical.
"""
from __future__ import annotations

import importlib

import pytest

from pt_decoder import parallel
from pt_decoder.event import cpu_errata
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder

OPTS = dict(mtc_freq=3, nom_freq=36, cpuid_0x15_eax=2, cpuid_0x15_ebx=300)


@pytest.fixture(scope="module")
def stream(tmp_path_factory, traces_dir):
    corpus = importlib.import_module("benchmarks.corpus")
    path = tmp_path_factory.mktemp("par") / "stream.pt"
    info = corpus.realistic_stream(path, size_mb=0.25, seed=7)
    image = Image()
    image.add_elf(info["elf"])
    return path.read_bytes(), image, info


def _same(a, b):
    assert len(a) == len(b)
    assert a.ip == b.ip
    assert a.tsc == b.tsc
    assert a.cycles == b.cycles
    assert a.flags == b.flags
    assert a.items == b.items


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_pieces_stitch_to_the_serial_result(stream, mode):
    data, image, info = stream
    kw = dict(OPTS, errata=cpu_errata(6, 85))
    serial = InsnDecoder(data, image, **kw).decode()
    assert len(serial) == info["instructions"]
    cuts = parallel.split_points(data, 4, min_bytes=16 * 1024)
    assert len(cuts) == 4
    par = parallel.decode_parallel(data, image, workers=2, mode=mode, pieces=4, **kw)
    _same(serial, par)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_streamed_pieces_join_to_the_serial_result(stream, mode):
    """decode_parallel_pieces (what `ptdebug decode --parallel` prints from): many small
    pieces, more than are ever in flight, each continuing the one before."""
    from pt_decoder.flow_result import FlowResult
    data, image, _ = stream
    kw = dict(OPTS, errata=cpu_errata(6, 85))
    serial = InsnDecoder(data, image, **kw).decode()
    pieces = list(parallel.decode_parallel_pieces(data, image, workers=2, mode=mode,
                                                  piece_bytes=16 * 1024, **kw))
    assert len(pieces) > 2 * 2 * 2
    joined = FlowResult(*parallel._empty())
    for piece in pieces:
        joined.extend(piece)
    _same(serial, joined)


def test_count_only_counts_the_same(stream):
    data, image, info = stream
    kw = dict(OPTS, errata=cpu_errata(6, 85))
    assert parallel.decode_parallel(data, image, workers=2, mode="thread", pieces=3, count_only=True,
                                    **kw) == info["instructions"]


def test_split_points_are_psbs_in_order(stream):
    data = stream[0]
    cuts = parallel.split_points(data, 5, min_bytes=1)
    assert cuts == sorted(set(cuts))
    assert all(data[c:c + 16] == parallel.PSB for c in cuts)
    assert cuts[0] == parallel.psb_offsets(data)[0]


def test_a_stream_without_psb_decodes_serially():
    flow = parallel.decode_parallel(b"\x00" * 100, [], workers=2)
    assert len(flow) == 0


def test_pieces_stitch_to_the_serial_result_on_a_damaged_stream(stream):
    import random
    data, image, _ = stream
    kw = dict(OPTS, errata=cpu_errata(6, 85))
    rng = random.Random(5)
    for _ in range(3):
        bad = bytearray(data)
        serial = None
        # a damaged timing payload (CYC, MTC) decodes without error: damage more then
        while serial is None or not serial.errors():
            for _ in range(5):
                bad[rng.randrange(len(bad))] = rng.randrange(256)
            serial = InsnDecoder(bytes(bad), image, **kw).decode()
        bad = bytes(bad)
        _same(serial, parallel.decode_parallel(bad, image, workers=2, mode="thread", pieces=4, **kw))


@pytest.mark.parametrize("damaged", [False, True], ids=["whole", "damaged"])
def test_counting_without_columns_is_the_decode_without_its_columns(stream, damaged):
    """count() and count_chunks() write no column (what the benchmark against libipt's block
    decoder and the index pass run): the same instructions and the same items, in the same
    places, as the decode that keeps every column; also through errors and resyncs (a byte
    flipped every 3,001, the decoder syncing again at the next PSB each time)."""
    data, image, _ = stream
    if damaged:
        data = bytearray(data)
        for at in range(1000, len(data), 3001):
            data[at] ^= 0x5A
        data = bytes(data)
    kw = dict(OPTS, errata=cpu_errata(6, 85))
    whole = InsnDecoder(data, image, **kw).decode()
    errors = sum(kind != "event" for kind, *_ in whole.items)
    assert errors > 20 if damaged else errors == 0
    assert InsnDecoder(data, image, **kw).count() == (len(whole), len(whole.items))
    items, done = [], 0
    for n, piece_items in InsnDecoder(data, image, **kw).count_chunks(777):
        items += [(kind, pos + done, *rest) for kind, pos, *rest in piece_items]
        done += n
    assert done == len(whole) and items == list(whole.items)


def test_cuts_and_warm_up_points_are_found_without_listing_every_psb(stream):
    """split_points and psb_before search near each cut only; they give what the list of every
    PSB gives: the first PSB at or after each equal share, and the PSB two before a cut."""
    data, _, _ = stream
    psbs = parallel.psb_offsets(data)
    assert len(psbs) > 40
    for pieces in (2, 3, 7, 40):
        expected = [psbs[0]]
        for k in range(1, pieces):
            want = len(data) * k // pieces
            nxt = next((p for p in psbs if p >= want and p > expected[-1]), None)
            if nxt is not None:
                expected.append(nxt)
        assert parallel.split_points(data, pieces, min_bytes=1) == expected
    for i in (0, 1, 2, 3, len(psbs) // 2, len(psbs) - 1):
        assert parallel.psb_before(data, psbs[i], 2) == psbs[max(0, i - 2)]
        assert parallel.psb_before(memoryview(data), psbs[i], 1) == psbs[max(0, i - 1)]
