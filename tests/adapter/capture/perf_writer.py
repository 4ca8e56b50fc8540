"""A perf.data writer for tests: lays out header, attrs, data records and
feature sections as tools/perf/Documentation/perf.data-file-format.txt
describes, so the importer can be tested on files whose every byte the test
chose (AUXTRACE records with real PT payloads, real sideband records)."""
from __future__ import annotations

import struct

ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7


def attr_bytes(type_: int, config: int, sample_type: int, flags: int) -> bytes:
    head = struct.pack("<IIQQQQQ", type_, ATTR_SIZE, config, 1, sample_type, 0, flags)
    return head + bytes(ATTR_SIZE - len(head))


def record(rtype: int, body: bytes, misc: int = 0) -> bytes:
    return struct.pack("<IHH", rtype, misc, 8 + len(body)) + body


def auxtrace_info_intel_pt(priv: list[int]) -> bytes:
    return record(70, struct.pack("<II", 1, 0) + struct.pack(f"<{len(priv)}Q", *priv))


def auxtrace(payload: bytes, tid: int, cpu: int = 0, idx: int = 0, offset: int = 0) -> bytes:
    """PERF_RECORD_AUXTRACE and the AUX bytes that follow it (not in header.size)."""
    body = struct.pack("<QQQIIII", len(payload), offset, 0, idx, tid, cpu, 0)
    return record(71, body) + payload


def header_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    raw += bytes(-len(raw) % 64)
    return struct.pack("<I", len(raw)) + raw


def build_id_feature(entries: list[tuple[int, bytes, str]]) -> bytes:
    out = b""
    for pid, build_id, name in entries:
        raw_name = name.encode() + b"\0"
        raw_name += bytes(-len(raw_name) % 8)
        bid = build_id + bytes(20 - len(build_id)) + bytes([len(build_id)]) + bytes(3)
        body = struct.pack("<i", pid) + bid + raw_name
        out += struct.pack("<IHH", 67, 1 << 15, 8 + len(body)) + body
    return out


def write_perf_data(path, attrs: list[tuple[bytes, list[int]]], data: bytes,
                    features: dict[int, bytes]) -> None:
    header_size = 104
    entry = ATTR_SIZE + 16
    ids_off = header_size
    ids_blob = b""
    attr_blob = b""
    attrs_off = ids_off + sum(8 * len(ids) for _, ids in attrs)
    for attr, ids in attrs:
        attr_blob += attr + struct.pack("<QQ", ids_off + len(ids_blob), 8 * len(ids))
        ids_blob += struct.pack(f"<{len(ids)}Q", *ids)
    data_off = attrs_off + len(attr_blob)
    feat_index_off = data_off + len(data)
    bits = sorted(features)
    feat_data_off = feat_index_off + 16 * len(bits)
    index = b""
    blobs = b""
    for bit in bits:
        index += struct.pack("<QQ", feat_data_off + len(blobs), len(features[bit]))
        blobs += features[bit]
    bitmap = [0, 0, 0, 0]
    for bit in bits:
        bitmap[bit // 64] |= 1 << (bit % 64)
    header = struct.pack("<8sQQ QQ QQ QQ 4Q", b"PERFILE2", header_size, entry,
                         attrs_off, len(attr_blob), data_off, len(data), 0, 0, *bitmap)
    with open(path, "wb") as f:
        f.write(header + ids_blob + attr_blob + data + index + blobs)
