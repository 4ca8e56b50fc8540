"""The DBI recorder: Frida's Stalker writes every basic block a thread executes into a ring in
shared memory; this drains the ring, turns the blocks into Intel PT and writes the same trace
bundle the Intel PT and stepper recorders write.

Layer: adapter.capture (a recorder behind the seam in recorders.py). It drives Frida and the
in-process agent (dbi_agent.js, the only file that runs in the target), applies the AVX-512
repair (dbi_repair.py) and encodes with pt_decoder.block_encoder; it knows nothing of DAP.

How a window runs:
  1. `DbiSession(pid)` waits until the main thread rests in a system call (Frida's injection
     runs on it: main_thread_at_rest), attaches Frida to the process once, loads the agent,
     rewrites Stalker's vector restore on AVX-512 CPUs (or refuses DBI there, saying why), and
     maps the block table (ids -> start, last instruction, instruction count) that the agent
     fills as Stalker compiles blocks.
  2. `session.window(tid)` follows the thread: from then on each block it runs writes its id
     into the window's ring (4 GiB of u32, sparse; dbi_agent.js has the layout).
  3. `Window.drain()` (called every few milliseconds) reads the ids written since, defines new
     blocks in the encoder (their instructions classified once, with capstone, from the live
     code), and feeds the ids to the BlockEncoder, which writes PT and counts instructions
     and call depth: the window ends there on its instruction limit or at the return of the
     function it began in, exactly, whatever the thread ran after (the thread is let go a
     few milliseconds later; what it wrote past the end is not read). It punches out of the
     ring file what it has read, so memory stays bounded however long the window runs.
  4. `Window.stop_following()` unfollows the thread and waits until the ring count stands
     still (the thread has left Stalker's code); `Window.finish()` returns the PT bytes.
     `session.close()` releases Stalker's code and the agent's mappings, detaches, and waits
     until Frida's agent has left: nothing of the recorder stays in the process.

What it cannot see: code Stalker does not follow (a signal handler the kernel enters runs
unrecorded; the recording resumes after it without a gap mark, see docs/recording.md), and
what Frida cannot attach to (recorders.py says which targets get the stepper instead).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from adapter.capture import dbi_repair
from adapter.hw import procfs
from pt_decoder import block_encoder as be
from pt_decoder.flow_encoder import CALL, FAR, OTHER, FlowEncoder

FRIDA_VERSION = "17.26.2"
"""The Frida build the AVX-512 repair was checked against (pyproject.toml pins it)."""

RING_HEADER = 4096
RING_SLOTS = 1 << 30                        # u32 ids: 4 GiB, addressed mod 2^32 by the agent
RING_BYTES = RING_HEADER + 4 * RING_SLOTS
TABLE_HEADER = 64
TABLE_ENTRY = 24
TABLE_IDS = 1 << 22                         # distinct blocks a session can define (100 MB sparse)
TABLE_BYTES = TABLE_HEADER + TABLE_ENTRY * TABLE_IDS
PUNCH_SLOTS = 16 << 20                      # give back ring memory 64 MiB at a time
MAX_LAG = 64 << 20
"""Blocks written but not yet encoded that a window may hold (256 MiB of ring). The writer
cannot wait for the drain (nothing on the execution path may branch), so a drain that falls
this far behind ends the window, partial, rather than let the ring's memory grow: on these
2-core machines the drain encodes about half as fast as Stalker runs a tight C loop."""
TIMING = {"tsc_hz": 1_000_000_000,
          "tsc_source": "CLOCK_MONOTONIC ns read by the DBI recorder each time it drains the "
                        "ring (every few ms): the blocks of one drain share its time",
          "mtc_freq": None, "nom_freq": None, "cpuid_0x15_eax": None, "cpuid_0x15_ebx": None,
          "cyc": False, "cyc_thresh": None, "cycles_per_unit": None, "clock": "wall"}


class DbiUnavailable(Exception):
    """DBI cannot record this target here; the text says why (the seam then picks the stepper)."""


class DbiError(Exception):
    """A DBI recording went wrong after it began; the text says what."""


def frida_module():
    """The `frida` package at the pinned version, or DbiUnavailable saying why not."""
    try:
        import frida
    except ImportError as exc:
        raise DbiUnavailable(f"the frida package is not installed ({exc}); "
                             f"pip install frida=={FRIDA_VERSION}") from None
    if frida.__version__ != FRIDA_VERSION:
        raise DbiUnavailable(f"frida {frida.__version__} is installed, but the DBI recorder "
                             f"was checked against {FRIDA_VERSION} (its AVX-512 repair "
                             "depends on the exact build)")
    return frida


def _agent_source() -> str:
    return resources.files("adapter.capture").joinpath("dbi_agent.js").read_text()


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 1, 2


def _punch(fd: int, offset: int, length: int) -> None:
    """Free the pages of a shared file already read (they read back as zeros)."""
    _libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE, offset, length)


def _shared_file(directory: str, name: str, size: int) -> tuple[str, int, mmap.mmap]:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    return path, fd, mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


@dataclass
class BlockInfo:
    start: int
    ninsn: int
    ips: list[int]                          # every instruction's address, in order
    cls: int
    fall: int
    target: int


AT_REST_WAIT_S = 2.0


def main_thread_at_rest(pid: int, wait_s: float = AT_REST_WAIT_S) -> bool:
    """Whether process `pid`'s main thread is seen waiting in a system call within `wait_s`.
    Frida's injector runs its bootstrap code on the main thread and restores only its
    general registers: in a thread interrupted in its own computation, xmm0-7's low halves and
    zmm16 then come back changed (seen once per attach in about half the tries on a thread
    busy with zmm registers or numpy). In a thread blocked in a system call, which it entered
    through a C function call, every vector register is caller-saved and dead, so nothing the
    program needs changes."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if not procfs.syscall(pid).running:
                return True
        except OSError:
            return True                       # gone, or not readable: frida says why
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)


class DbiSession:
    """Frida attached to process `pid` with the agent loaded (see the module doc). Raises
    DbiUnavailable when Frida cannot attach or the AVX-512 repair cannot be applied."""

    def __init__(self, pid: int, log=lambda msg: None, *, avx512_repair: bool = True):
        """avx512_repair False leaves Stalker's vector restore as Frida ships it: only for
        the test that shows what the repair prevents."""
        frida = frida_module()
        self.pid = pid
        self.log = log
        self.repair: str = "not needed (no AVX-512)"
        """What was done about Stalker's vector restore (for the manifest)."""
        self._dir = tempfile.mkdtemp(prefix="ptdebug-dbi-",
                                     dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self._files: list[tuple[str, int, mmap.mmap]] = []
        self._lock = threading.Lock()
        self.messages: list[str] = []
        """Errors the agent reported (a JS exception is a message, never silent)."""
        self.blocks: dict[int, BlockInfo] = {}
        self.left_behind: list[str] = []
        """What of the recorder was still mapped in the process after close() (nothing when
        all went well)."""
        self._mem = None
        self._flow = FlowEncoder(self.read_code)
        if not main_thread_at_rest(pid):
            self._remove_files()
            raise DbiUnavailable(
                f"the main thread of process {pid} kept running its own code for "
                f"{AT_REST_WAIT_S:g} s: Frida injects its agent by running code on that thread, "
                "which clobbers its vector registers (xmm0-7's low halves, zmm16) where the "
                "program may still need them; DBI attaches only while it waits in a system "
                "call (docs/recording.md)")
        try:
            self._session = frida.attach(pid)
        except Exception as exc:  # noqa: BLE001 - frida raises its own types for every refusal
            self._remove_files()
            raise DbiUnavailable(f"Frida cannot attach to process {pid}: {exc}") from None
        try:
            self._script = self._session.create_script(_agent_source())
            self._script.on("message", self._on_message)
            self._script.load()
            self.api = self._script.exports_sync
            if not avx512_repair:
                self.repair = "not applied (asked not to)"
            elif dbi_repair.cpu_has_avx512():
                where = dbi_repair.repair_stalker_epilog(pid)
                self.repair = f"Stalker's vector restore rewritten at {where:#x} (AVX-512)"
            path, _fd, self._table = self._add_file("table", TABLE_BYTES)
            self.api.setup(path, TABLE_BYTES)
            self._mem = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115 - kept
        except dbi_repair.RepairError as exc:
            self.close()
            raise DbiUnavailable(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a failed load must not leave Frida attached
            self.close()
            raise DbiUnavailable(f"the DBI agent could not start in process {pid}: "
                                 f"{exc}") from None

    def _add_file(self, name: str, size: int):
        entry = _shared_file(self._dir, name, size)
        self._files.append(entry)
        return entry

    def _on_message(self, message, data) -> None:
        if message.get("type") == "error":
            text = message.get("description") or str(message)
            self.messages.append(text)
            self.log(f"DBI agent error: {text}")

    def read_code(self, addr: int, size: int) -> bytes:
        self._mem.seek(addr)
        return self._mem.read(size)

    # -- the block table ---------------------------------------------------------------
    def defined_ids(self) -> int:
        return struct.unpack_from("<Q", self._table, 0)[0]

    def table_full(self) -> bool:
        return struct.unpack_from("<Q", self._table, 8)[0] != 0

    def block(self, block_id: int) -> BlockInfo:
        """Block `block_id` (defined by the agent), its instructions classified once."""
        info = self.blocks.get(block_id)
        if info is not None:
            return info
        start, last, ninsn = struct.unpack_from(
            "<QQI", self._table, TABLE_HEADER + TABLE_ENTRY * block_id)
        ips = []
        ip = start
        cls = fall = target = 0
        for _ in range(ninsn):
            ips.append(ip)
            cls, fall, target = self._flow.classify(ip)
            ip = fall
        if ips[-1] != last:
            raise DbiError(f"block {block_id} at {start:#x}: its {ninsn} instructions end at "
                           f"{ips[-1]:#x}, Stalker's at {last:#x} (the code changed?)")
        info = BlockInfo(start, ninsn, ips, cls, fall, target)
        self.blocks[block_id] = info
        return info

    def define(self, encoder: be.BlockEncoder, block_id: int) -> None:
        info = self.block(block_id)
        inner = []
        for k, ip in enumerate(info.ips[:-1]):
            cls, fall, target = self._flow.classify(ip)
            if cls == CALL and target != fall:
                inner.append((be.INNER_CALL, k, fall))
            elif cls == FAR:
                inner.append((be.INNER_FAR, k, fall))
            elif cls != OTHER and cls != CALL:
                raise DbiError(f"block {block_id} at {info.start:#x} has a branch inside it "
                               f"at {ip:#x}")
        encoder.define(block_id, info.start, info.ninsn, info.cls, info.fall, info.target,
                       inner)

    # -- windows -----------------------------------------------------------------------
    def window(self, tid: int, start_in: tuple[int, int] | None = None) -> Window:
        """Follow thread `tid` into a new ring. With `start_in` (lo, hi), the window opens at
        the first block the thread runs that starts in [lo, hi) (the blocks before it are
        read and dropped)."""
        name = f"ring-{tid}-{len(self._files)}"
        path, fd, ring = self._add_file(name, RING_BYTES)
        window = Window(self, tid, fd, ring, start_in=start_in)
        self.api.follow(tid, path, RING_BYTES)
        return window

    def close(self, unmap: bool = True) -> None:
        """Release Stalker and the agent's mappings, detach Frida, remove the shared files.
        unmap False: a followed thread may still be in Stalker's code, which writes into the
        ring: its mappings are left in the process (unmapping them would kill it) and only
        the files removed. Idempotent; never raises (the target must be let go whatever
        happened)."""
        with self._lock:
            script, self._script = getattr(self, "_script", None), None
            session, self._session = getattr(self, "_session", None), None
        if script is not None:
            try:
                script.exports_sync.release(unmap)
            except Exception as exc:  # noqa: BLE001 - the process may have exited
                self.log(f"DBI release: {exc}")
            try:
                script.unload()
            except Exception:  # noqa: BLE001
                pass
        if session is not None:
            try:
                session.detach()
            except Exception:  # noqa: BLE001
                pass
            self.left_behind = self._wait_agent_gone()
        if self._mem is not None:
            self._mem.close()
            self._mem = None
        self._remove_files()

    def _wait_agent_gone(self, timeout_s: float = 5.0) -> list[str]:
        """Wait until Frida's agent and the recorder's mappings have left the process.
        Frida unloads its agent asynchronously after a detach (through its injector); a
        program that exits, or a caller that waits for it, meanwhile has been seen to die
        of SIGTRAP (3 of 4 runs of an attach and detach, then an exit, 0 of 3 after this
        wait). Returns the mappings still there after `timeout_s` (none: all gone)."""
        deadline = time.monotonic() + timeout_s
        left: list[str] = []
        while time.monotonic() < deadline:
            try:
                left = [m.path for m in procfs.maps(self.pid)
                        if "frida" in m.path or self._dir in m.path]
            except OSError:
                return []                           # the process has exited
            if not left:
                return []
            time.sleep(0.02)
        self.log(f"the recorder's mappings were still in process {self.pid} "
                 f"{timeout_s:g} s after the detach: {sorted(set(left))}")
        return left

    def _remove_files(self) -> None:
        for path, fd, mapping in self._files:
            try:
                mapping.close()
            except (BufferError, ValueError):
                pass
            os.close(fd)
            os.unlink(path)
        self._files.clear()
        try:
            os.rmdir(self._dir)
        except OSError:
            pass


@dataclass
class DrainResult:
    stop: int = be.STOP_NONE                # a block_encoder STOP_* once the window has ended
    end_ip: int | None = None               # where the last instruction went
    cut_ip: int | None = None               # the window ended inside a block, before this
    new_starts: list[int] = field(default_factory=list)  # of the blocks this drain defined


@dataclass
class Window:
    """One followed thread's ring, drained into a BlockEncoder."""
    session: DbiSession
    tid: int
    fd: int
    ring: mmap.mmap
    encoder: be.BlockEncoder = field(default_factory=lambda: be.BlockEncoder(psb_period=4096))
    read: int = 0                           # blocks read from the ring
    punched: int = 0                        # ring slots given back (a multiple of PUNCH_SLOTS)
    started_ns: int = field(default_factory=time.monotonic_ns)
    start_in: tuple[int, int] | None = None  # the window opens at the first block starting here
    opened: bool = True
    stream: list[bytes] = field(default_factory=list)
    seen: np.ndarray = field(default_factory=lambda: np.zeros(TABLE_IDS, dtype=bool))
    """Which block ids the window ran (a flag an id: cheaper than collecting them per drain)."""
    lost: int = 0                           # blocks overwritten before they were read

    def __post_init__(self):
        self.ids = np.frombuffer(self.ring, dtype=np.uint32, count=RING_SLOTS, offset=RING_HEADER)
        self.opened = self.start_in is None

    def count(self) -> int:
        return struct.unpack_from("<Q", self.ring, 0)[0]

    @property
    def starts(self) -> set[int]:
        """The start addresses of the blocks the window ran."""
        return {self.session.block(int(b)).start for b in np.flatnonzero(self.seen)}

    def drain(self, max_instructions: int = 0, until_return: bool = False) -> DrainResult:
        """Encode the blocks written since the last drain (see the module doc)."""
        result = DrainResult()
        written = self.count()
        if written - self.read > RING_SLOTS:
            self.lost = written - self.read - RING_SLOTS
            raise DbiError(f"the recorder's ring overflowed: {self.lost} blocks were "
                           "overwritten before they were read")
        if written - self.read > MAX_LAG:
            raise DbiError(f"the drain fell {written - self.read} blocks behind the program "
                           f"(more than {MAX_LAG}, {4 * MAX_LAG >> 20} MiB of ring): the "
                           f"window ends at {self.encoder.instructions} instructions")
        self.encoder.set_time(time.monotonic_ns())
        while self.read < written:
            first = self.read % RING_SLOTS
            last = min(first + (written - self.read), RING_SLOTS)
            chunk = self.ids[first:last]
            consumed = self._open_in(chunk)
            if consumed:
                self._advance(consumed)
                continue
            done, reason, cut = self.encoder.feed(chunk, max_instructions, until_return)
            if reason == be.STOP_UNDEFINED:
                result.new_starts += self._define_from(int(chunk[done]))
                if done == 0:
                    continue
            self.seen[chunk[:done]] = True
            if reason in (be.STOP_COUNT, be.STOP_RETURN):
                result.stop = reason
                if reason == be.STOP_RETURN:
                    result.end_ip = self.session.block(int(chunk[done])).start
                else:
                    info = self.session.block(int(chunk[done - 1]))
                    if cut < info.ninsn:
                        result.cut_ip = info.ips[cut]
                    elif done < len(chunk):
                        result.end_ip = self.session.block(int(chunk[done])).start
                    elif self.read + done < self.count():
                        nxt = self.ids[(self.read + done) % RING_SLOTS]
                        result.end_ip = self.session.block(int(nxt)).start
                self._advance(done)
                return result
            self._advance(done)
        return result

    def _open_in(self, chunk) -> int:
        """Before the window opens (start_in): the blocks to skip in `chunk` (all of them
        while none starts in the range); 0 once open."""
        if self.opened:
            return 0
        session = self.session
        lo, hi = self.start_in
        opening = []
        for block_id in np.unique(chunk):
            block_id = int(block_id)
            if block_id >= session.defined_ids():
                raise DbiError(f"block id {block_id} is in the ring but not in the table")
            if lo <= session.block(block_id).start < hi:
                opening.append(block_id)
        if not opening:
            return len(chunk)
        index = int(np.argmax(np.isin(chunk, np.array(opening, dtype=np.uint32))))
        self.opened = True
        return index

    def _define_from(self, block_id: int) -> list[int]:
        """Define every block id up to the table's count (at least `block_id`); returns the
        start addresses of the blocks it defined."""
        session = self.session
        defined = session.defined_ids()
        if block_id >= defined:
            raise DbiError(f"block id {block_id} is in the ring but not in the table "
                           f"({defined} defined)")
        new = []
        for b in range(block_id, defined):
            if not self.encoder.is_defined(b):
                session.define(self.encoder, b)
                new.append(session.blocks[b].start)
        return new

    def _advance(self, consumed: int) -> None:
        self.read += consumed
        data = self.encoder.take()
        if data:
            self.stream.append(data)
        # give the read part of the ring back to the system, PUNCH_SLOTS at a time
        while self.read - self.punched >= PUNCH_SLOTS:
            first = self.punched % RING_SLOTS
            _punch(self.fd, RING_HEADER + 4 * first, 4 * PUNCH_SLOTS)
            self.punched += PUNCH_SLOTS

    def stop_following(self, settle_s: float = 10.0) -> bool:
        """Unfollow the thread and wait until its ring count stands still for 20 ms (it has
        left Stalker's code). A thread looping in blocks Stalker has already linked never
        re-enters Stalker's runtime, where an unfollow takes effect: the blocks it ran last
        (the ring's newest ids) are invalidated, so the next of them it runs takes it there;
        again with the newest ones while it still records. False when it still moved after
        `settle_s` (its mappings must then stay, see DbiSession.close)."""
        session = self.session
        first = True
        deadline = time.monotonic() + settle_s
        last = self.count()
        while True:
            try:
                if first:
                    session.api.unfollow(self.tid, self._recent_starts())
                    first = False
                else:
                    session.api.invalidate(self.tid, self._recent_starts())
            except Exception as exc:  # noqa: BLE001 - the process may have exited
                session.log(f"DBI unfollow of {self.tid}: {exc}")
                return True
            time.sleep(0.02)
            now = self.count()
            if now == last:
                return True
            last = now
            if time.monotonic() > deadline:
                return False

    def _recent_starts(self, newest: int = 64) -> list[str]:
        """The starts of the distinct blocks among the thread's `newest` ring entries. Few:
        Frida invalidates each block on another thread through its own ptrace round trip
        (gum_process_modify_thread), so a round over the newest 4096 entries (hundreds of
        blocks) took seconds on a loaded machine; a looping thread runs its newest blocks
        again at once, and a thread elsewhere is caught by the next round."""
        written = self.count()
        lo = max(0, written - newest, written - RING_SLOTS)
        ids = [int(self.ids[k % RING_SLOTS]) for k in range(lo, written)]
        defined = self.session.defined_ids()
        starts = set()
        for block_id in set(ids):
            if block_id < defined:
                starts.add(struct.unpack_from("<Q", self.session._table,
                                              TABLE_HEADER + TABLE_ENTRY * block_id)[0])
        return [hex(start) for start in starts]

    def finish(self, result: DrainResult | None) -> bytes:
        """The whole PT stream of the window, its end written."""
        if result is None or result.stop == be.STOP_NONE:
            tail = self.encoder.finish()
        else:
            tail = self.encoder.finish(end_ip=result.end_ip, cut_ip=result.cut_ip)
        return b"".join(self.stream) + tail
