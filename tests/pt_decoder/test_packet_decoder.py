"""Unit tests of the packet layer (pt_decoder/packet.pyx) from the SDM's packet formats.

Each stream here is assembled by hand from the Intel SDM Vol. 3C PT chapter's
packet layouts, so the tests check the decoder against the manual, not
against the project's encoder. Names say which rule each test checks.
"""
from __future__ import annotations

import array
import mmap
import struct

import pytest

from pt_decoder.errors import ErrorCode, PtError
from pt_decoder.packet import RECORD_FIELDS, RECORD_FORMAT, Kind, PacketDecoder

PSB = bytes([0x02, 0x82] * 8)
PSBEND = bytes([0x02, 0x23])


def decode(data: bytes, **kw) -> list:
    dec = PacketDecoder(data, **kw)
    assert dec.sync_forward() is not None
    return list(dec)


def body(data: bytes, **kw) -> list:
    """Packets after the leading PSB."""
    return decode(PSB + data, **kw)[1:]


# ---- IP compression (SDM "IP Compression" table) -------------------------

def test_ip_compression_update_16_32_48_sext_and_full_follow_last_ip():
    pkts = body(
        bytes([0xCD]) + (0x00007FFF12345678).to_bytes(8, "little")   # TIP full (110b)
        + bytes([0x2D]) + (0xABCD).to_bytes(2, "little")             # TIP update-16 (001b)
        + bytes([0x4D]) + (0xDEADBEEF).to_bytes(4, "little")         # TIP update-32 (010b)
        + bytes([0x6D]) + (0x800000001000).to_bytes(6, "little")     # TIP sext-48 (011b)
        + bytes([0x8D]) + (0x123456789ABC).to_bytes(6, "little")     # TIP update-48 (100b)
    )
    assert [p.kind for p in pkts] == [Kind.TIP] * 5
    assert [p.ipc for p in pkts] == [6, 1, 2, 3, 4]
    assert [p.size for p in pkts] == [9, 3, 5, 7, 7]
    assert [hex(p.ip) for p in pkts] == [
        "0x7fff12345678", "0x7fff1234abcd", "0x7fffdeadbeef",
        "0xffff800000001000", "0xffff123456789abc"]
    assert all(p.ip_valid for p in pkts)
    assert pkts[1].payload == 0xABCD          # the raw IP bytes stay available


def test_ip_compression_sext_48_positive_clears_high_bytes():
    (fup,) = body(bytes([0x7D]) + (0x00007FFFFFFF0000).to_bytes(6, "little"))
    assert fup.kind == Kind.FUP and fup.ipc == 3 and fup.ip == 0x7FFFFFFF0000


def test_suppressed_ip_is_invalid_and_leaves_last_ip_alone():
    pkts = body(bytes([0xD1]) + (0x401000).to_bytes(8, "little")   # TIP.PGE full
                + bytes([0x01])                                  # TIP.PGD suppressed
                + bytes([0x3D]) + (0x2000).to_bytes(2, "little"))  # FUP update-16
    pge, pgd, fup = pkts
    assert (pge.kind, pgd.kind, fup.kind) == (Kind.TIP_PGE, Kind.TIP_PGD, Kind.FUP)
    assert pgd.ipc == 0 and pgd.size == 1 and not pgd.ip_valid
    assert fup.ip == 0x402000 and fup.ip_valid


def test_psb_resets_last_ip_to_zero():
    pkts = decode(PSB + bytes([0xCD]) + (0x7FFF00001000).to_bytes(8, "little")
                  + PSB + bytes([0x2D, 0x34, 0x12]))
    assert pkts[-1].kind == Kind.TIP and pkts[-1].ip == 0x1234 and pkts[-1].ip_valid


def test_compressed_ip_after_seek_without_psb_is_not_valid():
    dec = PacketDecoder(bytes([0x2D, 0x34, 0x12, 0x6D]) + (0x1000).to_bytes(6, "little")
                        + bytes([0x2D, 0x78, 0x56]))
    dec.seek(0)
    upd16, sext, upd16b = list(dec)
    assert upd16.ip == 0x1234 and not upd16.ip_valid
    assert sext.ip_valid and upd16b.ip == 0x5678 and upd16b.ip_valid


@pytest.mark.parametrize("ipc", [5, 7])
def test_reserved_ip_compression_is_bad_packet_at_its_offset(ipc):
    dec = PacketDecoder(PSB + bytes([(ipc << 5) | 0x0D]) + bytes(8))
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_PACKET and err.value.offset == 16
    assert dec.offset == 16          # the decoder stays at the bad packet


# ---- TNT ---------------------------------------------------------------------

def test_short_tnt_bits_oldest_just_below_stop_bit():
    # TNT-8 (SDM "Short TNT"): bit 0 is 0, bits 7:1 hold a stop bit and then
    # the branches, oldest first. 0001011|0: stop bit, then N T T.
    (tnt,) = body(bytes([0b0001_0110]))
    assert tnt.kind == Kind.TNT8 and tnt.count == 3
    assert tnt.fields["taken"] == (False, True, True)


def test_short_tnt_with_six_bits():
    (tnt,) = body(bytes([0b1101_0110]))   # stop at bit 7; bits 6:1 = 101011
    assert tnt.count == 6 and tnt.fields["taken"] == (True, False, True, False, True, True)


def test_long_tnt_bit_order_oldest_first_below_stop_bit():
    # Long TNT: 48-bit payload, stop bit after the last valid bit (SDM "Long
    # TNT Packet"). Stop at bit 5, bits 4:0 = 10110b -> T N T T N.
    payload = (1 << 5) | 0b10110
    (tnt,) = body(bytes([0x02, 0xA3]) + payload.to_bytes(6, "little"))
    assert tnt.kind == Kind.TNT64 and tnt.size == 8 and tnt.count == 5
    assert tnt.payload == 0b10110
    assert tnt.fields["taken"] == (True, False, True, True, False)


def test_long_tnt_carries_47_bits():
    payload = (1 << 47) | 0x5555_5555_5555
    (tnt,) = body(bytes([0x02, 0xA3]) + payload.to_bytes(6, "little"))
    assert tnt.count == 47 and tnt.payload == 0x5555_5555_5555


def test_long_tnt_without_stop_bit_is_bad_packet():
    dec = PacketDecoder(PSB + bytes([0x02, 0xA3]) + bytes(6))
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_PACKET and err.value.offset == 16


# ---- timing packets ------------------------------------------------------------

def test_cyc_single_byte_holds_five_bits():
    (cyc,) = body(bytes([(0x17 << 3) | 0x03]))
    assert cyc.kind == Kind.CYC and cyc.size == 1 and cyc.payload == 0x17


def test_cyc_multi_byte_value_is_5_plus_7_bits_per_byte():
    # 0x1234 = 10100b in byte 0 (ext bit set), 0010001b in byte 1 (ext), 1 in byte 2.
    (cyc,) = body(bytes([0xA7, 0x23, 0x02]))
    assert cyc.size == 3 and cyc.payload == 0x1234


def test_cyc_longer_than_64_bits_is_bad_packet():
    dec = PacketDecoder(PSB + bytes([0x07] + [0x01] * 10 + [0x00]))
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_PACKET and err.value.offset == 16


def test_tsc_tma_mtc_cbr_payloads():
    pkts = body(bytes([0x19]) + (0x123456789ABCDE).to_bytes(7, "little")   # TSC
                + bytes([0x02, 0x73, 0x34, 0x12, 0x00, 0xFF, 0x01])        # TMA ctc fc=0x1ff
                + bytes([0x59, 0xAB])                                      # MTC
                + bytes([0x02, 0x03, 0x24, 0x00]))                         # CBR
    tsc, tma, mtc, cbr = pkts
    assert (tsc.kind, tsc.size, tsc.payload) == (Kind.TSC, 8, 0x123456789ABCDE)
    assert (tma.kind, tma.size, tma.fields) == (Kind.TMA, 7, {"ctc": 0x1234, "fc": 0x1FF})
    assert (mtc.kind, mtc.payload) == (Kind.MTC, 0xAB)
    assert (cbr.kind, cbr.size, cbr.payload) == (Kind.CBR, 4, 0x24)


@pytest.mark.parametrize("tma", [bytes([0x02, 0x73, 1, 1, 0x01, 1, 0]),    # reserved byte
                                 bytes([0x02, 0x73, 1, 1, 0, 1, 0x40])])   # FC bit 14
def test_tma_reserved_bits_are_bad_packet_or_invalid_under_skz84(tma):
    dec = PacketDecoder(PSB + tma + bytes([0x00]))
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_PACKET and err.value.offset == 16
    pkts = body(tma + bytes([0x00]), errata_skz84=True)
    assert pkts[0].kind == Kind.INVALID and pkts[0].size == 8


# ---- the other packets ----------------------------------------------------------

def test_mode_exec_and_tsx_leaves():
    pkts = body(bytes([0x99, 0x01, 0x99, 0x02, 0x99, 0x05, 0x99, 0x21, 0x99, 0x22]))
    assert [p.kind for p in pkts] == [Kind.MODE_EXEC] * 3 + [Kind.MODE_TSX] * 2
    assert pkts[0].fields == {"csl": True, "csd": False, "if": False}
    assert pkts[2].fields["if"] is True
    assert pkts[3].fields == {"intx": True, "abrt": False}
    assert pkts[4].fields == {"intx": False, "abrt": True}


def test_mode_with_unknown_leaf_is_bad_packet():
    dec = PacketDecoder(PSB + bytes([0x99, 0x40]))
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_PACKET


def test_pip_cr3_and_nr_and_vmcs_base():
    cr3 = 0x1234_5678_9000
    pip_payload = (cr3 >> 5) << 1 | 1
    pkts = body(bytes([0x02, 0x43]) + pip_payload.to_bytes(6, "little")
                + bytes([0x02, 0xC8]) + (0xABCDE).to_bytes(5, "little"))
    pip, vmcs = pkts
    assert pip.kind == Kind.PIP and pip.fields == {"cr3": cr3, "nr": True}
    assert vmcs.kind == Kind.VMCS and vmcs.payload == 0xABCDE000


def test_ovf_stop_psbend_mnt_pad():
    pkts = body(bytes([0x02, 0xF3, 0x02, 0x83, 0x00]) + PSBEND
                + bytes([0x02, 0xC3, 0x88]) + (0x1122334455667788).to_bytes(8, "little"))
    assert [p.kind for p in pkts] == [Kind.OVF, Kind.STOP, Kind.PAD, Kind.PSBEND, Kind.MNT]
    assert pkts[-1].size == 11 and pkts[-1].payload == 0x1122334455667788


def test_power_packets_and_ptwrite():
    pkts = body(bytes([0x02, 0x62, 0x02, 0xE2])                                 # EXSTOP, +IP
                + bytes([0x02, 0xC2]) + (7).to_bytes(4, "little") + (1).to_bytes(4, "little")
                + bytes([0x02, 0x22, 0x08, 0x21])                               # PWRE hw C2.1
                + bytes([0x02, 0xA2, 0x52, 0x04, 0, 0, 0])                      # PWRX store
                + bytes([0x02, 0x92]) + (0xDEADBEEF).to_bytes(4, "little")      # PTW 4B + IP
                + bytes([0x02, 0x32]) + (1 << 63).to_bytes(8, "little"))        # PTW 8B
    kinds = [p.kind for p in pkts]
    assert kinds == [Kind.EXSTOP, Kind.EXSTOP, Kind.MWAIT, Kind.PWRE, Kind.PWRX, Kind.PTW, Kind.PTW]
    assert [p.fields["ip"] for p in pkts[:2]] == [False, True]
    assert pkts[2].fields == {"hints": 7, "ext": 1}
    assert pkts[3].fields == {"state": 2, "sub_state": 1, "hw": True}
    assert pkts[4].fields["last"] == 5 and pkts[4].fields["deepest"] == 2
    assert pkts[4].fields["store"] and not pkts[4].fields["interrupt"]
    assert pkts[5].fields == {"payload": 0xDEADBEEF, "bytes": 4, "ip": True}
    assert pkts[6].size == 10 and pkts[6].payload == 1 << 63


def test_ptwrite_with_reserved_payload_size_is_bad_packet():
    dec = PacketDecoder(PSB + bytes([0x02, 0x52]) + bytes(8))
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_PACKET


def test_pebs_block_items_take_their_size_from_bbp():
    pkts = body(bytes([0x02, 0x63, 0x80 | 0x01])           # BBP type 1, SZ=1 (4-byte items)
                + bytes([(3 << 3) | 4]) + (0x11223344).to_bytes(4, "little")
                + bytes([0x02, 0xB3])                      # BEP with IP
                + bytes([0x04]))                           # outside a block: TNT-8
    bbp, bip, bep, tnt = pkts
    assert (bbp.kind, bbp.fields) == (Kind.BBP, {"type": 1, "sz": True})
    assert (bip.kind, bip.size, bip.fields) == (Kind.BIP, 5, {"id": 3, "value": 0x11223344,
                                                              "bytes": 4})
    assert bep.kind == Kind.BEP and bep.fields["ip"]
    assert tnt.kind == Kind.TNT8
    (_bbp8, bip8) = body(bytes([0x02, 0x63, 0x02, 0x0C]) + (2 ** 64 - 1).to_bytes(8, "little"))
    assert bip8.size == 9 and bip8.payload == 2 ** 64 - 1


def test_event_trace_and_trigger_packets():
    pkts = body(bytes([0x02, 0x13, 0x81, 0x0E])                                  # CFE intr 14 +IP
                + bytes([0x02, 0x53, 0x00]) + (0xFFFF8000DEAD0000).to_bytes(8, "little")
                + bytes([0xD9, 0xC0, 0x05, 0x34, 0x12])                          # TRIG ip icntv
                + bytes([0xD9, 0x20, 0x01]))                                     # TRIG mult
    cfe, evd, trig, trig2 = pkts
    assert cfe.fields == {"type": 1, "vector": 14, "ip": True} and cfe.size == 4
    assert evd.fields == {"type": 0, "payload": 0xFFFF8000DEAD0000} and evd.size == 11
    assert trig.size == 5 and trig.fields == {"trbv": 5, "icnt": 0x1234, "ip": True,
                                              "mult": False, "icntv": True}
    assert trig2.size == 3 and trig2.fields["mult"] and not trig2.fields["icntv"]


@pytest.mark.parametrize("newer", [bytes([0xD9, 0, 0]), bytes([0x02, 0x13, 1, 1]),
                                   bytes([0x02, 0x53]) + bytes(9), bytes([0x02, 0x63, 0]),
                                   bytes([0x02, 0x33])])
def test_libipt_205_packet_set_rejects_newer_packets_as_bad_opcode(newer):
    dec = PacketDecoder(PSB + newer, sdm_packets=False)
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_OPC and err.value.offset == 16


@pytest.mark.parametrize("opcode", [bytes([0xC9]), bytes([0x02, 0x04]), bytes([0x02, 0xC3, 0x00])])
def test_unknown_opcodes_are_bad_opc(opcode):
    dec = PacketDecoder(PSB + opcode + bytes(4))
    dec.sync_forward()
    dec.next()
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_OPC and err.value.offset == 16


# ---- truncation: lengths are checked before reading ---------------------------

@pytest.mark.parametrize("packet", [
    bytes([0x19]) + bytes(7), bytes([0xCD]) + bytes(8), bytes([0x02, 0xA3, 0, 0, 0, 0, 0, 1]),
    bytes([0x02, 0xC3, 0x88]) + bytes(8), bytes([0x02, 0x73, 0, 0, 0, 0, 0]),
    bytes([0x07, 0x01, 0x00]), bytes([0x02, 0xC2]) + bytes(8), PSB,
])
def test_every_cut_of_a_packet_is_a_truncated_eos_at_its_offset(packet):
    for cut in range(1, len(packet)):
        dec = PacketDecoder(PSB + PSBEND + packet[:cut])
        dec.sync_forward()
        dec.next()
        dec.next()
        with pytest.raises(PtError) as err:
            dec.next()
        assert err.value.code == ErrorCode.EOS and err.value.offset == 18
        assert "truncated" in str(err.value)


def test_next_returns_none_at_the_end():
    dec = PacketDecoder(PSB + PSBEND)
    dec.sync_forward()
    assert [p.kind for p in (dec.next(), dec.next())] == [Kind.PSB, Kind.PSBEND]
    assert dec.next() is None and dec.next() is None and dec.offset == 18


def test_next_before_sync_raises_nosync():
    with pytest.raises(PtError) as err:
        PacketDecoder(PSB).next()
    assert err.value.code == ErrorCode.NOSYNC


# ---- synchronisation -------------------------------------------------------------

STREAM = bytes(3) + PSB + bytes([0x06, 0x06]) + PSB + PSBEND + bytes(5) + PSB + bytes([0x00])
PSB_AT = [3, 21, 44]


def test_sync_forward_visits_each_psb_in_turn():
    dec = PacketDecoder(STREAM)
    assert dec.sync_offset is None
    found = []
    while (off := dec.sync_forward()) is not None:
        found.append(off)
        assert dec.offset == off == dec.sync_offset
    assert found == PSB_AT


def test_sync_backward_visits_psbs_from_the_end():
    dec = PacketDecoder(STREAM)
    found = []
    while (off := dec.sync_backward()) is not None:
        found.append(off)
    assert found == PSB_AT[::-1]


def test_sync_set_requires_a_psb():
    dec = PacketDecoder(STREAM)
    dec.sync_set(21)
    assert dec.offset == 21 and dec.next().kind == Kind.PSB
    with pytest.raises(PtError) as err:
        dec.sync_set(22)
    assert err.value.code == ErrorCode.NOSYNC
    with pytest.raises(PtError) as err:
        dec.sync_set(len(STREAM) + 1)
    assert err.value.code == ErrorCode.EOS


def test_no_psb_means_no_sync():
    assert PacketDecoder(bytes(100)).sync_forward() is None
    assert PacketDecoder(b"").sync_forward() is None
    assert PacketDecoder(bytes(100)).sync_backward() is None


def test_resync_finds_a_psb_partly_swallowed_by_a_bad_packet():
    # An MNT header in front of a PSB eats 8 PSB bytes; the rest decodes as a
    # broken PSB. Sync forward looks 15 bytes back and finds the real one.
    fup = bytes([0x7D]) + (0xA0001000).to_bytes(6, "little")
    data = bytes(6) + PSB + bytes([0x02, 0xC3, 0x88]) + PSB + fup + PSBEND
    dec = PacketDecoder(data)
    dec.sync_forward()
    assert [dec.next().kind, dec.next().kind] == [Kind.PSB, Kind.MNT]
    with pytest.raises(PtError) as err:
        dec.next()
    assert err.value.code == ErrorCode.BAD_PACKET and err.value.offset == 0x21
    assert dec.sync_forward() == 0x19
    assert [p.kind for p in dec] == [Kind.PSB, Kind.FUP, Kind.PSBEND]


def test_decode_all_collects_errors_with_offsets_and_resyncs():
    data = PSB + bytes([0xC9]) + PSB + PSBEND
    errors: list = []
    pkts = PacketDecoder(data).decode_all(errors)
    assert [(p.kind, p.offset) for p in pkts] == [(Kind.PSB, 0), (Kind.PSB, 17), (Kind.PSBEND, 33)]
    assert [(e.code, e.offset) for e in errors] == [(ErrorCode.BAD_OPC, 16)]
    with pytest.raises(PtError):
        PacketDecoder(data).decode_all()


# ---- buffers: any buffer, never copied ----------------------------------------------

def test_decoder_reads_the_callers_bytes_without_copying():
    data = bytearray(PSB + bytes([0x59, 0x01]))
    dec = PacketDecoder(data)
    data[17] = 0x7F                      # visible to the decoder: it holds no copy
    dec.sync_forward()
    assert [p.payload for p in dec][-1] == 0x7F
    with pytest.raises(BufferError):
        data.extend(b"x")                # the decoder pins the buffer while it lives


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview,
                                  lambda b: memoryview(b"xx" + b)[2:],
                                  lambda b: array.array("B", b)])
def test_any_contiguous_buffer_is_accepted(wrap):
    data = PSB + PSBEND
    assert [p.kind for p in PacketDecoder(wrap(data)).decode_all()] == [Kind.PSB, Kind.PSBEND]


def test_mmap_of_a_trace_file(tmp_path):
    path = tmp_path / "t.pt"
    path.write_bytes(PSB + PSBEND + bytes([0x59, 0x05]))
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    dec = PacketDecoder(mapped)
    assert [p.kind for p in dec.decode_all()] == [Kind.PSB, Kind.PSBEND, Kind.MTC]
    del dec


def test_non_contiguous_buffer_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="contiguous"):
        PacketDecoder(memoryview(bytes(PSB * 2))[::2])


# ---- fast paths agree with the Python API on real traces -------------------------------

def test_count_and_kinds_agree_with_decode_all_on_real_traces(traces_dir):
    paths = sorted(traces_dir.glob("dynamorio-drpt2trace/*/pt.bin"))
    assert paths, "no DynamoRIO traces found"
    for path in paths:
        data = path.read_bytes()
        errors: list = []
        pkts = PacketDecoder(data).decode_all(errors)
        assert PacketDecoder(data).count() == (len(pkts), len(errors))
        assert PacketDecoder(data).kinds() == bytes(p.kind_id for p in pkts)
        records = PacketDecoder(data).records()
        assert len(records) == 40 * len(pkts)
        assert struct.unpack_from(RECORD_FORMAT, records, 40 * 7) == tuple(
            getattr(pkts[7], f if f != "kind" else "kind_id") for f in RECORD_FIELDS)
        assert len(pkts) > 1000


def test_sync_backward_always_moves_back_even_inside_a_pattern_run():
    # A run of PSB pattern longer than one PSB: the search resolves runs to
    # the PSB that ends them, which must not trap repeated backward syncs.
    data = bytes(5) + bytes([0x02, 0x82] * 13) + PSBEND + PSB
    dec = PacketDecoder(data)
    seen = []
    for _ in range(10):
        off = dec.sync_backward()
        if off is None:
            break
        assert not seen or off < seen[-1]
        seen.append(off)
    assert seen[0] == len(data) - 16 and off is None
