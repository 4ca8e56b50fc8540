"""pt_decoder.lines on real binaries built at test time: C (gcc -g -O0 and -O2) and Go.

Oracles: binutils `addr2line` for DWARF, `go tool addr2line` for Go (it reads
pclntab through Go's own debug/gosym), Go's DWARF against its pclntab, and
the `// @marker` comments of the fixture sources for what a line means.
"""
from __future__ import annotations

import random
import shutil
import subprocess
from array import array

import pytest
from fixture_builds import build_c, build_go, marker_line

from pt_decoder.errors import ErrorCode, PtError
from pt_decoder.image import Image
from pt_decoder.lines import LineRow, LineTable

C_SRC = "lines_demo.c"
GO_SRC = "lines_demo.go"


def function_ranges(binary) -> dict[str, tuple[int, int]]:
    """name -> (start, end) of the text symbols, from `nm -S`."""
    out = {}
    text = subprocess.run(["nm", "-S", str(binary)], capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tT":
            start, size = int(parts[0], 16), int(parts[1], 16)
            out[parts[3]] = (start, start + size)
    return out


@pytest.fixture(scope="module", params=["-O0", "-O2"])
def c_binary(request, tmp_path_factory):
    return build_c(C_SRC, tmp_path_factory.mktemp("lines"), "-g", request.param)


@pytest.fixture(scope="module")
def go_binary(tmp_path_factory):
    return build_go(GO_SRC, tmp_path_factory.mktemp("golines"))


def addr2line(binary, addresses, tool=("addr2line", "-e")) -> list[tuple[str, int] | None]:
    out = subprocess.run([*tool, str(binary), *(hex(a) for a in addresses)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    result = []
    for line in out:
        file, _, number = line.split(" (")[0].rpartition(":")
        result.append(None if number in ("?", "0") else (file, int(number)))
    return result


def objdump_statements(binary, line: int) -> list[int]:
    """Addresses of the is_stmt rows of lines_demo.c:`line`, from objdump's decoded line table."""
    text = subprocess.run(["objdump", "--dwarf=decodedline", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    found = set()
    for row in text.splitlines():
        parts = row.split()
        if (len(parts) >= 4 and parts[0] == C_SRC and parts[1] == str(line)
                and parts[2].startswith("0x") and parts[-1] == "x"):
            found.add(int(parts[2], 16))
    return sorted(found)


def test_c_lookup_equals_addr2line_at_every_byte(c_binary):
    table = LineTable.for_elf(str(c_binary))
    funcs = function_ranges(c_binary)
    addresses = [a for name in ("square", "sum_squares", "main") for a in range(*funcs[name])]
    assert table.lookup(funcs["square"][0])[0].endswith(C_SRC)
    assert [table.lookup(a) for a in addresses] == addr2line(c_binary, addresses)


def test_c_markers_map_to_their_functions(c_binary):
    table = LineTable.for_elf(str(c_binary))
    funcs = function_ranges(c_binary)
    src = str(table.lookup(funcs["square"][0])[0])
    entry, body = marker_line(C_SRC, "square_entry"), marker_line(C_SRC, "square_body")
    # -O2 puts the entry's row and the body's row at one address; the last describes it.
    assert table.lookup(funcs["square"][0]) in ((src, entry), (src, body))
    assert funcs["square"][0] in table.statement_addresses(src, entry)
    for marker, func in (("sum_call", "sum_squares"), ("main_call", "main"), ("main_print", "main")):
        line = marker_line(C_SRC, marker)
        ranges = table.addresses(C_SRC, line)       # a relative path is enough
        assert ranges, marker
        lo, hi = funcs[func]
        for start, end in ranges:
            assert lo <= start < end <= hi, (marker, hex(start))
            assert table.lookup(start) == (src, line) and table.lookup(end - 1) == (src, line)
        stmts = table.statement_addresses(src, line)
        assert stmts and all(lo <= a < hi for a in stmts)
        assert stmts == objdump_statements(c_binary, line), marker
    assert table.addresses(C_SRC, 10_000) == [] and table.addresses("nosuch.c", 5) == []


def test_c_is_stmt_rows_at_O2(tmp_path):
    """gcc -O2 emits rows with is_stmt false. Plain line ids keep their own line;
    statement line ids give such an instruction the line of the statement it
    continues (the last is_stmt row before it), unless a statement begins at its
    very address. Expected values come from objdump's decoded line table."""
    binary = build_c(C_SRC, tmp_path, "-g", "-O2")
    table = LineTable.for_elf(str(binary))
    text = subprocess.run(["objdump", "--dwarf=decodedline", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    rows = []   # (address, line, is_stmt) in sequence order, every file (inlined headers too)
    for row in text.splitlines():
        parts = row.split()
        if len(parts) >= 3 and parts[2].startswith("0x") and (parts[1] == "-" or parts[1].isdigit()):
            rows.append((int(parts[2], 16), None if parts[1] == "-" else int(parts[1]), parts[-1] == "x"))
    last = {}  # address -> its last row, and the statement it continues
    stmt_line, stmt_addr = None, None
    for address, line, is_stmt in rows:
        if line is None:
            stmt_line, stmt_addr = None, None
            continue
        if is_stmt:
            stmt_line, stmt_addr = line, address
        expected = line if is_stmt or stmt_addr == address or stmt_line is None else stmt_line
        last[address] = (line, expected)
    folded = [a for a, (line, expected) in last.items() if line != expected]
    if not folded:
        pytest.fail("gcc -O2 emitted no foldable is_stmt=false row; the fixture no longer tests this")
    ips = array("Q", sorted(last))
    plain, stmt = table.line_ids(ips), table.line_ids(ips, statements=True)
    for ip, p, s in zip(ips, plain, stmt):
        assert table.line_key(p)[1] == last[ip][0], hex(ip)
        assert table.line_key(s)[1] == last[ip][1], hex(ip)


def test_vectorised_line_ids_equal_lookup(c_binary):
    table = LineTable.for_elf(str(c_binary))
    funcs = function_ranges(c_binary)
    lo, hi = min(f[0] for f in funcs.values()), max(f[1] for f in funcs.values())
    rng = random.Random(7)
    ips = array("Q", (rng.randrange(lo - 64, hi + 64) for _ in range(20_000)))
    ids = table.line_ids(ips)
    assert len(ids) == len(ips)
    for ip, ident in zip(ips, ids):
        assert table.line_key(ident) == table.lookup(ip)
    assert table.line_ids(array("Q")) == array("I")


def test_go_pclntab_equals_go_tool_addr2line(go_binary):
    table = LineTable.for_elf(str(go_binary))
    funcs = function_ranges(go_binary)
    rng = random.Random(3)
    addresses = [a for name in ("main.square", "main.sumSquares", "main.main") for a in range(*funcs[name])]
    for name in rng.sample(sorted(funcs), 150):       # and a sample of the runtime
        lo, hi = funcs[name]
        addresses += rng.sample(range(lo, hi), min(hi - lo, 8))
    go = shutil.which("go")
    out = subprocess.run([go, "tool", "addr2line", str(go_binary)], input="".join(f"{a:#x}\n" for a in addresses),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    compared = 0
    for k, a in enumerate(addresses):
        func, where = out[2 * k], out[2 * k + 1]
        file, _, number = where.rpartition(":")
        if not file or file == "?" or int(number) <= 0:
            continue   # marker symbols such as go:textfipsstart have no position
        assert table.lookup(a) == (file, int(number)), hex(a)
        assert table.function(a)[0] == func, hex(a)
        compared += 1
    assert compared > len(addresses) * 0.9


def test_go_markers_and_dwarf_agree_with_pclntab(go_binary):
    pcln = LineTable.for_elf(str(go_binary))
    dwarf = LineTable.for_elf(str(go_binary), source="dwarf")
    funcs = function_ranges(go_binary)
    for name in ("main.square", "main.sumSquares", "main.main"):
        for a in range(*funcs[name]):
            assert dwarf.lookup(a) == pcln.lookup(a), hex(a)
    lo, hi = funcs["main.sumSquares"]
    line = marker_line(GO_SRC, "go_sum_call")
    ranges = pcln.addresses(GO_SRC, line)
    assert ranges and all(lo <= s < e <= hi for s, e in ranges)
    assert pcln.function(ranges[0][0]) == ("main.sumSquares", lo)
    body = pcln.addresses(GO_SRC, marker_line(GO_SRC, "go_square_body"))
    assert body and all(funcs["main.square"][0] <= s < funcs["main.square"][1] for s, _ in body)
    assert pcln.lookup(body[0][0])[0].endswith("/" + GO_SRC)


def test_for_image_merges_modules_at_their_bases(tmp_path):
    binary = build_c(C_SRC, tmp_path, "-g", "-O0")
    base = 0x7000_0000_0000
    image = Image()
    image.add_elf(str(binary), base=base)
    image.add_raw(b"\x90" * 16, 0x1000)        # no line information: left out
    table = LineTable.for_image(image)
    plain = LineTable.for_elf(str(binary))
    square = function_ranges(binary)["square"][0]
    assert table.lookup(base + square) == plain.lookup(square)
    assert table.lookup(square) is None


def test_from_rows_and_merge():
    a = LineTable.from_rows([(0x100, "a.c", 1), (0x104, "a.c", 2, 0, False)], end=0x110)
    b = LineTable.from_rows([(0x200, "b.go", 7)], end=0x208)
    both = LineTable.merge([a, b])
    assert both.lookup(0x103) == ("a.c", 1) and both.lookup(0x10F) == ("a.c", 2)
    assert both.lookup(0x110) is None and both.lookup(0x204) == ("b.go", 7) and both.lookup(0x208) is None
    assert both.row_at(0x105) == LineRow(0x104, "a.c", 2, 0, False)
    assert both.addresses("a.c", 2) == [(0x104, 0x110)]
    assert both.statement_addresses("a.c", 2) == []


def test_bad_inputs(tmp_path):
    binary = build_c(C_SRC, tmp_path, "-O1")       # no -g: no .debug_line
    with pytest.raises(PtError) as err:
        LineTable.for_elf(str(binary))
    assert err.value.code == ErrorCode.BAD_IMAGE and ".debug_line" in str(err.value)
    with pytest.raises(PtError) as err:
        LineTable.for_elf(str(binary), source="pclntab")
    assert err.value.code == ErrorCode.BAD_IMAGE and "gopclntab" in str(err.value)
    text = tmp_path / "x.txt"
    text.write_text("not elf")
    with pytest.raises(PtError) as err:
        LineTable.for_elf(str(text))
    assert err.value.code == ErrorCode.BAD_IMAGE
    with pytest.raises(PtError) as err:
        LineTable.for_elf(str(tmp_path / "absent"))
    assert err.value.code == ErrorCode.BAD_FILE


@pytest.mark.live
def test_live_go_process_image_and_lines(go_binary):
    """A running Go program: its image (static, non-PIE) names Go functions, and the
    line table built from the image's modules reads pclntab at the right base."""
    proc = subprocess.Popen([str(go_binary), "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("ready")
        image = Image.from_process(proc.pid)
        exe = next(m for m in image.modules if m.path == str(go_binary))
        assert exe.kind == "elf" and exe.base == 0
        square = function_ranges(go_binary)["main.square"][0]
        assert image.symbolize(square + 1).name == "main.square"
        with open(f"/proc/{proc.pid}/mem", "rb", buffering=0) as mem:
            mem.seek(square)
            assert image.read(square, 16) == mem.read(16)
        table = LineTable.for_image(image)
        own = LineTable.for_elf(str(go_binary))
        assert table.lookup(square) == own.lookup(square) and table.lookup(square)[0].endswith(GO_SRC)
        assert table.function(square + 1) == ("main.square", square)
    finally:
        proc.kill()
        proc.wait()
