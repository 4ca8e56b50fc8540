"""readMemory / writeMemory on the debuggee through /proc/PID/mem.

Layer: feature (adapter level, beside watchpoints and recorder). Reads the memory of the
process whose id the backend learnt (debugpy's `process` event, `systemProcessId`). Knows
nothing of DAP framing or backends; it gets typed arguments and returns response bodies.

/proc/PID/mem (proc(5)) needs ptrace-attach rights over the process (PTRACE_MODE_ATTACH_FSCREDS):
the debuggee is our descendant, or we are root. A read of an unmapped page fails with EIO; the
reply then carries what was readable and `unreadableBytes`, as the DAP readMemory response
describes, so VS Code's memory view can skip the hole.

A write goes only into mappings the process itself may write (`w` in /proc/PID/maps): the
kernel lets /proc/PID/mem write through page protections (FOLL_FORCE, how debuggers plant
breakpoints), so without this check writeMemory changed the code of libc (issue 17); the
contract in docs/protocol.md is error 1501 for memory that is not writable.
"""
from __future__ import annotations

import base64
import binascii
import errno
import os

from adapter.hw import procfs
from adapter.protocol.errors import InvalidMemoryReference, InvalidRequest, MemoryAccessError
from adapter.protocol.schema import ReadMemoryArguments, WriteMemoryArguments

PAGE = os.sysconf("SC_PAGE_SIZE")
MAX_TRANSFER = 16 * 1024 * 1024
"""Largest readMemory/writeMemory accepted (the framing limit bounds the reply as well)."""
ADDRESS_LIMIT = 1 << 63
"""pread/pwrite offsets are signed 64-bit; user-space addresses on x86-64 are far below."""


def parse_address(reference: str, offset: int = 0) -> int:
    """A DAP memoryReference (decimal, or hex with 0x) plus `offset`, checked to be an address.

    Raises InvalidMemoryReference naming the reference."""
    try:
        address = int(reference.strip(), 0)
    except ValueError:
        raise InvalidMemoryReference(f"memoryReference {reference!r} is not an address "
                                     "(decimal, or hex with 0x)") from None
    address += offset
    if not 0 <= address < 1 << 64:
        raise InvalidMemoryReference(f"address {reference} + {offset} is outside 0..2^64")
    return address


def format_address(address: int) -> str:
    return f"0x{address:x}"


class ProcessMemory:
    """The memory of one process, read and written through /proc/PID/mem."""

    def __init__(self, pid: int):
        self.pid = pid
        """The debuggee's process id."""
        self.originals = None
        """(address, count) -> {address: byte}: the program's own bytes where a debugger
        planted breakpoints (the backend's `original_bytes`), put back into what is read."""

    def _open(self, flags: int) -> int:
        try:
            return os.open(f"/proc/{self.pid}/mem", flags)
        except FileNotFoundError:
            raise MemoryAccessError(f"process {self.pid} has exited") from None
        except PermissionError as exc:
            raise MemoryAccessError(f"no permission to access the memory of process "
                                    f"{self.pid} ({exc.strerror}); ptrace rights are needed "
                                    "(see kernel.yama.ptrace_scope)") from None

    def read(self, address: int, count: int) -> tuple[bytes, int]:
        """(readable bytes from `address`, unreadable bytes that follow them within `count`),
        as the program sees them: a debugger's planted breakpoints show their original bytes.

        Raises MemoryAccessError when the process is gone or may not be read at all."""
        data, unreadable = self._read(address, count)
        if self.originals is not None and data:
            data = _restore(data, address, self.originals(address, len(data)))
        return data, unreadable

    def _read(self, address: int, count: int) -> tuple[bytes, int]:
        fd = self._open(os.O_RDONLY)
        try:
            whole = _pread(fd, count, address)
            if whole is not None and len(whole) == count:
                return whole, 0
            data = bytearray()
            pos, end = address, address + count
            while pos < end:
                chunk = _pread(fd, min(end, _next_page(pos)) - pos, pos)
                if not chunk:
                    break
                data += chunk
                pos += len(chunk)
            unreadable_from = pos
            while pos < end and not _pread(fd, 1, pos):
                pos = min(end, _next_page(pos))
            return bytes(data), pos - unreadable_from
        finally:
            os.close(fd)

    def writable_run(self, address: int, size: int) -> tuple[int, str]:
        """(how many of the `size` bytes from `address` lie in writable mappings, one after
        the other; what stops the run: '' or a description of the mapping or hole)."""
        try:
            mappings = procfs.maps(self.pid)
        except FileNotFoundError:
            raise MemoryAccessError(f"process {self.pid} has exited") from None
        except OSError as exc:
            raise MemoryAccessError(f"cannot read the mappings of process {self.pid}: "
                                    f"{exc.strerror}") from None
        pos, end = address, address + size
        for m in mappings:
            if m.end <= pos:
                continue
            if m.start > pos:
                return pos - address, f"{format_address(pos)} is not mapped"
            if "w" not in m.perms:
                name = os.fsencode(m.path).decode(errors="replace")
                return pos - address, (f"{format_address(pos)} is in a read-only mapping "
                                       f"({m.perms} {name or '[anon]'})")
            pos = m.end
            if pos >= end:
                return size, ""
        return (pos - address, f"{format_address(pos)} is not mapped") if pos < end \
            else (size, "")

    def write(self, address: int, data: bytes, allow_partial: bool) -> int:
        """Bytes written from the start of `data`, into writable mappings only. Raises
        MemoryAccessError when the first byte is not writable, and, without `allow_partial`,
        when a later one is not; nothing is retried past the first page that refuses."""
        writable, why = self.writable_run(address, len(data))
        if writable == 0 and data:
            raise MemoryAccessError(f"cannot write process {self.pid}: {why}")
        if writable < len(data):
            if not allow_partial:
                raise MemoryAccessError(
                    f"only {writable} of {len(data)} bytes at {format_address(address)} are "
                    f"writable in process {self.pid}: {why} (set allowPartial to write the "
                    "writable ones)")
            data = data[:writable]
        fd = self._open(os.O_RDWR)
        try:
            written = 0
            while written < len(data):
                pos = address + written
                piece = data[written:min(len(data), written + _next_page(pos) - pos)]
                try:
                    n = os.pwrite(fd, piece, pos) if pos < ADDRESS_LIMIT else 0
                except OSError as exc:
                    if exc.errno not in (errno.EIO, errno.EFAULT, errno.EINVAL):
                        raise MemoryAccessError(f"writing process {self.pid} at "
                                                f"{format_address(pos)}: {exc.strerror}") from None
                    n = 0
                if n <= 0:
                    break
                written += n
        finally:
            os.close(fd)
        if written < len(data) and not allow_partial:
            raise MemoryAccessError(
                f"only {written} of {len(data)} bytes at {format_address(address)} are writable "
                f"in process {self.pid} (set allowPartial to write them anyway)")
        return written


def _restore(data: bytes, address: int, originals: dict[int, int]) -> bytes:
    """`data` read at `address` with the bytes of `originals` ({address: byte}) put back."""
    inside = {a: b for a, b in originals.items() if address <= a < address + len(data)}
    if not inside:
        return data
    patched = bytearray(data)
    for a, b in inside.items():
        patched[a - address] = b
    return bytes(patched)


def _next_page(address: int) -> int:
    return (address // PAGE + 1) * PAGE


def _pread(fd: int, count: int, offset: int) -> bytes | None:
    if count <= 0 or offset >= ADDRESS_LIMIT:
        return b"" if count <= 0 else None
    try:
        return os.pread(fd, min(count, ADDRESS_LIMIT - offset), offset)
    except OSError as exc:
        if exc.errno in (errno.EIO, errno.EFAULT, errno.EINVAL, errno.ENOMEM):
            return None
        raise MemoryAccessError(f"reading memory at {format_address(offset)}: "
                                f"{exc.strerror}") from None


def read_memory(memory: ProcessMemory, args: ReadMemoryArguments) -> dict:
    """The body of a readMemory response."""
    if not 0 <= args.count <= MAX_TRANSFER:
        raise InvalidRequest(f"arguments.count must be between 0 and {MAX_TRANSFER}, "
                             f"got {args.count}")
    address = parse_address(args.memoryReference, args.offset)
    data, unreadable = memory.read(address, min(args.count, (1 << 64) - address))
    body = {"address": format_address(address), "data": base64.b64encode(data).decode("ascii")}
    if unreadable:
        body["unreadableBytes"] = unreadable
    return body


def write_memory(memory: ProcessMemory, args: WriteMemoryArguments) -> dict:
    """The body of a writeMemory response."""
    try:
        data = base64.b64decode(args.data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("arguments.data is not base64") from None
    if len(data) > MAX_TRANSFER:
        raise InvalidRequest(f"arguments.data is longer than {MAX_TRANSFER} bytes")
    address = parse_address(args.memoryReference, args.offset)
    return {"offset": 0, "bytesWritten": memory.write(address, data, args.allowPartial)}
