"""The libipt binding's own checks: its struct layouts equal GCC's for the real intel-pt.h.

A small C probe is generated from the binding's tables, compiled against
/usr/include/intel-pt.h and run; it prints sizeof/offsetof values and, for every bit-field
the binding reads by hand, where GCC put it (byte offset and bit). Then a few behaviours
the differential tests rely on: pt_enc_next/pt_pkt_next round trips, resync after an
error, and the instruction decoder on a real recording.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from oracle import libipt

libipt.require()          # fails loudly where libipt is missing; bootstrap installs it


def _probe_source() -> str:
    lines = ["#include <stdio.h>", "#include <string.h>", "#include <stddef.h>",
             "#include <intel-pt.h>",
             "static void where(const char *name, const unsigned char *p, size_t n) {",
             "  for (size_t i = 0; i < n; i++) for (int b = 0; b < 8; b++)",
             "    if (p[i] >> b & 1) { printf(\"%s=%zu:%d\\n\", name, i, b); return; }",
             "  printf(\"%s=none\\n\", name); }",
             "int main(void) {"]
    for expr in libipt.EXPECTED_LAYOUT:
        lines.append(f'  printf("%s=%zu\\n", "{expr}", (size_t) {expr});')
    for n, (lvalue, ctype, _off, _bit) in enumerate(libipt.EXPECTED_BITS):
        var = lvalue.split(".")[0]
        member = lvalue[len(var) + 1:]
        lines.append(f"  {{ {ctype} {var}; memset(&{var}, 0, sizeof {var}); "
                     f"{var}.{member} = 1; where(\"{lvalue}\", (const unsigned char *) &{var}, "
                     f"sizeof {var}); }}")
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict[str, str]:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: scripts/bootstrap.sh installs build-essential")
    folder = tmp_path_factory.mktemp("libipt-probe")
    src, exe = folder / "probe.c", folder / "probe"
    src.write_text(_probe_source())
    subprocess.run(["gcc", "-O0", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_struct_sizes_and_offsets_match_gcc(probe):
    got = {expr: int(probe[expr]) for expr in libipt.EXPECTED_LAYOUT}
    assert got == libipt.EXPECTED_LAYOUT


def test_bit_fields_are_where_gcc_packs_them(probe):
    got = {lvalue: probe[lvalue] for lvalue, *_ in libipt.EXPECTED_BITS}
    want = {lvalue: f"{off}:{bit}" for lvalue, _t, off, bit in libipt.EXPECTED_BITS}
    assert got == want
    # The classic snag: the PTW IP bit shares a 4-byte unit with plc (byte 9, not 12).
    assert got["packet.payload.ptw.ip"] == "17:0"


def test_version_and_error_texts():
    assert libipt.version() == "2.0.5"
    assert libipt.errstr(-libipt.PTE_EOS) == "reached end of trace stream"
    assert libipt.errstr(libipt.PTE_BAD_CPU) == "unknown cpu"


def test_encode_decode_round_trip_and_resync():
    packets = [{"kind": "psb"}, {"kind": "tsc", "tsc": 0x1234}, {"kind": "psbend"},
               {"kind": "fup", "ipc": 3, "ip": 0x401000},
               {"kind": "ptw", "payload": 0xAB, "plc": 0, "ip": 1},
               {"kind": "pwrx", "last": 1, "deepest": 2, "interrupt": 0, "store": 1,
                "autonomous": 1}]
    data = libipt.libipt_encode(packets)
    decoded = libipt.libipt_packets(data)
    assert [{k: v for k, v in p.items() if k not in ("offset", "size")} for p in decoded] == packets
    assert [p["offset"] for p in decoded] == [0, 16, 24, 26, 33, 39]
    broken = data[:26] + b"\xd9" + data                 # 0xd9: libipt 2.0.5's bad opcode
    got = libipt.libipt_packets(broken)
    assert got[3] == {"kind": "error", "offset": 26, "code": libipt.PTE_BAD_OPC}
    assert got[4]["kind"] == "psb" and got[4]["offset"] == 27


def test_insn_decoder_on_a_real_recording(traces_dir):
    folder = traces_dir / "lldb-intelpt" / "intelpt-trace"
    data = (folder / "3842849.trace").read_bytes()
    want = [line.split()[0] for line in
            (folder / "3842849.libipt-2.0.5.insn.txt").read_text().splitlines()
            if line[:1] not in ("[", "")]
    for cached in (False, True):
        records = libipt.libipt_insns(data, libipt.elf_sections(folder / "a.out"), "6/79/1",
                                      cached=cached)
        assert [f"{ip:016x}" for ip in libipt.ips(records)] == want
    blocks = libipt.libipt_blocks(data, libipt.elf_sections(folder / "a.out"), "6/79/1")
    assert sum(b["ninsn"] for b in blocks if b["type"] == "blk") == len(want)
