"""The DAP `disassemble` request for a live debuggee: capstone over /proc/PID/mem, with symbols.

Layer: feature (adapter level). Code bytes come from the process memory (adapter.memory, so a
patched or JIT-compiled byte is shown as it is now); function names come from
`pt_decoder.image.Image.from_process` (ELF .symtab/.dynsym of every mapped file, the vDSO,
perf-map files of JIT code), source lines from `pt_decoder.lines` (DWARF .debug_line) where a
module has them. Knows nothing of DAP framing or backends.

DAP asks for exactly `instructionCount` instructions around an address, also *before* it
(negative `instructionOffset`, which VS Code sends when the view scrolls up). x86 cannot be
decoded backwards, so the start is searched for: decoding from some bytes earlier must land
exactly on the address. Where memory is unreadable or no decoding fits, the reply is padded
with one-byte entries marked `presentationHint: 'invalid'`, as the specification asks.

Every request has a bounded, linear cost (issue 17: `instructionOffset: -100000` kept the adapter
busy for minutes with a quadratic search, and `-10**12` ran it out of memory): `instructionCount`
and `instructionOffset` are each at most `MAX_INSTRUCTIONS` in size (refused with 1200 beyond),
and the search backwards decodes one window of `MAX_INSN_BYTES` bytes per instruction wanted,
from at most `MAX_INSN_BYTES` start points.
"""
from __future__ import annotations

import logging
import os
import threading

import capstone

from adapter.memory import PAGE, ProcessMemory, format_address, parse_address
from adapter.protocol.errors import InvalidRequest
from adapter.protocol.schema import DisassembleArguments

log = logging.getLogger("ptdebug.dap")

MAX_INSTRUCTIONS = 10_000
"""Largest instructionCount, and largest instructionOffset either way."""
LINES_MAX_FILE = 4 * 1024 * 1024
"""Source lines are shown for modules up to this size with their own line table (as the
native frames of a data breakpoint, docs/protocol.md)."""
DECODE_PIECE = 256
"""Bytes handed to capstone at a time while searching backwards (a restart after an
undecodable byte copies this much, never the rest of the window)."""
MAX_INSN_BYTES = 15  # the x86 instruction length limit (Intel SDM Vol. 2A, 2.3.11)


class Disassembler:
    """Disassembles one process's code, caching its symbol image until a new module appears."""

    def __init__(self, memory: ProcessMemory):
        self.memory = memory
        """Where code bytes are read from."""
        self._cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        self._image = None
        self._image_lock = threading.Lock()
        self._line_tables: dict[tuple[str, int], object] = {}

    def disassemble(self, args: DisassembleArguments) -> dict:
        """The body of a disassemble response: exactly `instructionCount` instructions."""
        if not 0 <= args.instructionCount <= MAX_INSTRUCTIONS:
            raise InvalidRequest(f"arguments.instructionCount must be between 0 and "
                                 f"{MAX_INSTRUCTIONS}, got {args.instructionCount}")
        if not -MAX_INSTRUCTIONS <= args.instructionOffset <= MAX_INSTRUCTIONS:
            raise InvalidRequest(f"arguments.instructionOffset must be between "
                                 f"-{MAX_INSTRUCTIONS} and {MAX_INSTRUCTIONS}, got "
                                 f"{args.instructionOffset}")
        address = parse_address(args.memoryReference, args.offset)
        count, skip = args.instructionCount, args.instructionOffset
        if skip >= 0:
            insns = self._forward(address, skip + count)[skip:]
        else:
            before = self._backward(address, -skip)
            insns = before + self._forward(address, max(0, count + skip))
            insns = insns[:count]
            if len(before) < -skip:  # pad in front so the entries keep their positions
                first = insns[0][0] if insns else address
                pad = [_invalid(first - i - 1) for i in range(-skip - len(before))][::-1]
                insns = (pad + insns)[:count]
        while len(insns) < count:
            last = insns[-1] if insns else None
            insns.append(_invalid(last[0] + max(1, last[3]) if last else address))
        symbols = self._symbols(insns) if args.resolveSymbols else {}
        lines = self._lines(insns)
        return {"instructions": [self._entry(insn, symbols, lines) for insn in insns]}

    # --- decoding -------------------------------------------------------------------------
    def _forward(self, address: int, count: int) -> list[tuple]:
        """Up to `count` (address, mnemonic+operands, bytes, size) tuples from `address`;
        an undecodable or unreadable byte becomes an 'invalid' tuple and decoding goes on."""
        out: list[tuple] = []
        pos = address
        while len(out) < count and pos < 1 << 64:
            want = min((count - len(out)) * MAX_INSN_BYTES, 64 * 1024)
            code, _ = self.memory.read(pos, min(want, (1 << 64) - pos))
            if not code:
                out.append(_invalid(pos))
                pos += 1
                continue
            decoded = 0
            for insn_addr, size, mnemonic, op_str in self._cs.disasm_lite(code, pos):
                text = f"{mnemonic} {op_str}".strip()
                out.append((insn_addr, text, code[insn_addr - pos: insn_addr - pos + size], size))
                decoded += size
                if len(out) >= count:
                    break
            pos += decoded
            if len(out) < count and decoded < len(code) - MAX_INSN_BYTES:
                out.append(_invalid(pos))  # capstone stopped at a byte it cannot decode
                pos += 1
            elif decoded == 0:
                out.append(_invalid(pos))
                pos += 1
        return out

    def _backward(self, address: int, count: int) -> list[tuple]:
        """The `count` instructions that end exactly at `address`, or as many as can be found.

        Reads the (readable part of the) `count * MAX_INSN_BYTES` bytes before `address` once,
        and decodes them from each of the first MAX_INSN_BYTES start points: x86 decoding
        falls into step with the real instruction boundaries within a few instructions, so a
        start far enough back ends exactly at `address`. The first start whose last `count`
        instructions are all decodable wins; else the one with the fewest undecodable bytes."""
        code = self._readable_before(address, count * MAX_INSN_BYTES)
        start = address - len(code)
        best: list[tuple] = []
        best_invalid = None
        for shift in range(min(MAX_INSN_BYTES, len(code))):
            insns = self._decode_buffer(code, shift, start)[-count:]
            invalid = sum(1 for insn in insns if not insn[2])
            if invalid == 0 and len(insns) == count:
                return insns
            if best_invalid is None or (invalid, -len(insns)) < (best_invalid, -len(best)):
                best, best_invalid = insns, invalid
        # undecodable bytes at the front of the window are padding the caller adds anyway
        while best and not best[0][2]:
            best = best[1:]
        return best

    def _readable_before(self, address: int, size: int) -> bytes:
        """The readable bytes that end at `address`, at most `size` of them: all of them in
        one read when the window is mapped, else page by page backwards to the first hole."""
        start = max(0, address - size)
        code, _ = self.memory.read(start, address - start)
        if len(code) == address - start:
            return code
        pieces: list[bytes] = []
        pos = address
        while pos > start:
            low = max(start, (pos - 1) // PAGE * PAGE)
            piece, _ = self.memory.read(low, pos - low)
            if len(piece) < pos - low:
                break
            pieces.append(piece)
            pos = low
        return b"".join(reversed(pieces))

    def _decode_buffer(self, code: bytes, first: int, base: int) -> list[tuple]:
        """Every instruction of `code[first:]` (at `base + first`), an undecodable byte
        becoming an 'invalid' tuple and decoding going on after it. Linear in len(code):
        capstone is given pieces of DECODE_PIECE bytes (a stop inside one restarts there)."""
        out: list[tuple] = []
        pos = first
        while pos < len(code):
            decoded = 0
            for insn_addr, size, mnemonic, op_str in self._cs.disasm_lite(
                    code[pos:pos + DECODE_PIECE], base + pos):
                offset = insn_addr - base
                out.append((insn_addr, f"{mnemonic} {op_str}".strip(),
                            code[offset:offset + size], size))
                decoded += size
            pos += decoded
            if decoded == 0:  # an undecodable byte here (or a cut instruction at the end)
                out.append(_invalid(base + pos))
                pos += 1
        return out

    # --- presentation ---------------------------------------------------------------------
    def _symbols(self, insns: list[tuple]) -> dict[int, str]:
        image = self._image_for(insns)
        if image is None:
            return {}
        names = {}
        for insn in insns:
            symbol = image.symbolize(insn[0])
            if symbol is not None:
                names[insn[0]] = symbol.display
        return names

    def _image_for(self, insns: list[tuple]):
        from pt_decoder.errors import PtError
        from pt_decoder.image import Image
        with self._image_lock:
            wanted = [i[0] for i in insns if i[2]]
            if self._image is None or (wanted and self._image.module_at(wanted[0]) is None
                                       and self._image.section_at(wanted[0]) is None):
                try:
                    self._image = Image.from_process(self.memory.pid, perf_map=True)
                except PtError as exc:
                    log.info("no symbols for process %d: %s", self.memory.pid, exc)
                    return None
            return self._image

    def _lines(self, insns: list[tuple]) -> dict[int, tuple[str, int]]:
        """address -> (source file, line) from the DWARF line table of the module mapped
        there (pt_decoder.lines), for modules that have one."""
        from pt_decoder.errors import PtError
        from pt_decoder.lines import LineTable
        image = self._image
        if image is None:
            return {}
        found = {}
        for insn in insns:
            if not insn[2]:
                continue
            module = image.module_at(insn[0])
            if module is None or module.kind != "elf":
                continue
            key = (module.path, module.base)
            if key not in self._line_tables:
                try:
                    self._line_tables[key] = (LineTable.for_elf(module.path, module.base)
                                              if has_own_lines(module.path) else None)
                except PtError:
                    self._line_tables[key] = None  # no line information: only symbols
            table = self._line_tables[key]
            place = table.lookup(insn[0]) if table is not None else None
            if place is not None and place[1] > 0:
                found[insn[0]] = place
        return found

    @staticmethod
    def _entry(insn: tuple, symbols: dict[int, str],
               lines: dict[int, tuple[str, int]]) -> dict:
        address, text, code, _ = insn
        entry = {"address": format_address(address), "instruction": text}
        if code:
            entry["instructionBytes"] = code.hex(" ")
        else:
            entry["presentationHint"] = "invalid"
        name = symbols.get(address)
        if name:
            entry["symbol"] = name
        place = lines.get(address)
        if place is not None:
            entry["location"] = {"name": os.path.basename(place[0]), "path": place[0]}
            entry["line"] = place[1]
        return entry


def has_own_lines(path: str) -> bool:
    """Whether the file carries its own line table that is quick to read: a Go binary's
    .gopclntab (decoded in C), or DWARF in a file of at most LINES_MAX_FILE (the user's native
    code). A system library's lines live in a separate debug package (libc's takes a minute to
    read), which would hold the request, and the session, that long."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        small = os.path.getsize(path) <= LINES_MAX_FILE
        with open(path, "rb") as f:
            elf = ELFFile(f)
            names = (".gopclntab", ".debug_line", ".zdebug_line") if small else (".gopclntab",)
            return any(elf.get_section_by_name(name) is not None for name in names)
    except (OSError, ELFError):
        return False


def _invalid(address: int) -> tuple:
    return (address, "??", b"", 1)
