"""One DBI recording, end to end: start or attach to the program, follow the thread, drain
the ring until the window's end condition, write the bundle, and let the program go.

Layer: adapter.capture (policy of the DBI recorder, the counterpart of record.py for the
stepper). It strings together dbi.py (Frida, the ring, the encoder), bundle.py (storage) and
the process's mappings; `ptdebug record --recorder dbi` calls `record_dbi`. Guarantees on
every exit path: the thread is unfollowed and Frida detached (nothing of the recorder stays in
the process), a launched program is resumed, and the bundle directory exists with a manifest
that says "complete" or "partial" and why.
"""
from __future__ import annotations

import bisect
import os
import time

from adapter.capture import dbi
from adapter.capture.bundle import BundleWriter, copy_images_in
from adapter.capture.record import RecordFailed, RecordResult, _comm
from adapter.capture.stepper import EndCondition
from adapter.capture.target import TargetError, find_symbol, tgid_of
from adapter.hw import cpu as cpu_mod
from adapter.hw import procfs
from pt_decoder import block_encoder as be

POLL_S = 0.002
"""How often the ring is drained while it fills (the encoder keeps up with it in C)."""


def _exec_mappings(pid: int) -> list[tuple[int, int, int, str]]:
    """(start, end, offset, name) of every executable mapping of `pid` but [vsyscall]
    (anonymous code named "[anon]")."""
    return [(m.start, m.end, m.offset, m.path or "[anon]") for m in procfs.maps(pid)
            if "x" in m.perms and m.path != "[vsyscall]"]


class _Images:
    """The executable mappings the recorded code ran in, read while the process lives (a
    launched program maps its libraries after the window opened, and may exit before it
    closes): file mappings are referenced, anonymous code and the vDSO copied."""

    def __init__(self, pid: int):
        self.pid = pid
        self.mappings: dict[tuple[int, int, str], int] = {}
        self.snapshots: dict[tuple[int, int, str], bytes] = {}
        self.refresh()

    def refresh(self) -> None:
        try:
            found = _exec_mappings(self.pid)
        except OSError:
            return                                   # the process has exited
        for lo, hi, offset, name in found:
            self.mappings.setdefault((lo, hi, name), offset)

    def covers(self, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi, _ in self.mappings)

    def snapshot_used(self, starts: list[int]) -> None:
        """Copy the anonymous mappings holding any of `starts` (sorted), while they still
        exist; one copied before is kept."""
        for (lo, hi, name) in self.mappings:
            if name.startswith("/") or (lo, hi, name) in self.snapshots:
                continue
            i = bisect.bisect_left(starts, lo)
            if i < len(starts) and starts[i] < hi:
                try:
                    with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as mem:
                        mem.seek(lo)
                        self.snapshots[(lo, hi, name)] = mem.read(hi - lo)
                except OSError:
                    pass

    def write(self, writer: BundleWriter, starts: list[int]) -> list[str]:
        """Add the mappings holding executed code to the bundle; returns warnings."""
        from pt_decoder.image import Image
        warnings = []
        for (lo, hi, name), offset in sorted(self.mappings.items()):
            i = bisect.bisect_left(starts, lo)
            if not (i < len(starts) and starts[i] < hi):
                continue
            if name.startswith("/") and os.path.isfile(name):
                try:
                    build_id = Image().add_mapping(name, lo, offset, hi - lo).build_id
                except Exception:  # noqa: BLE001 - not an ELF file: referenced without one
                    build_id = None
                writer.add_image(name, lo, offset, hi - lo, build_id=build_id, kind="elf",
                                 pid=self.pid)
            elif (lo, hi, name) in self.snapshots:
                label = name.strip("[]").replace("/", "_") or "anon"
                writer.add_snapshot(f"{label}-{lo:x}.bin", lo, self.snapshots[(lo, hi, name)],
                                    pid=self.pid, origin=name)
            else:
                warnings.append(f"the code at {lo:#x}-{hi:#x} ({name}) ran in the window but "
                                "could not be read into the bundle")
        outside = [s for s in starts if not self.covers(s)]
        if outside:
            warnings.append(f"{len(outside)} executed blocks lie outside every mapping read "
                            f"(first at {outside[0]:#x})")
        return warnings


def _resolve(pid: int, spec: str) -> int:
    try:
        return int(spec, 0)
    except ValueError:
        pass
    found = find_symbol(pid, spec)
    if found is None:
        raise RecordFailed(f"no function named {spec!r} in process {pid} or the libraries it "
                           "has loaded (check the spelling)")
    return found


def _alive(pid: int, launched: bool) -> bool:
    if launched:
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return False
        if done:
            _alive.exit_status[pid] = _status
            return False
        return True
    return os.path.exists(f"/proc/{pid}")


_alive.exit_status = {}


def _exit_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def record_dbi(output: str, *, command: list[str] | None = None, pid: int | None = None,
               tid: int | None = None, start: str | None = None, end: EndCondition | None = None,
               copy_images: bool = True, max_instructions: int = 50_000_000,
               wait_for_exit: bool = True, log=lambda msg: None,
               trigger_timeout: float | None = None, why: str = "chosen by the caller",
               on_attached=None, at_drain=None, stage=None) -> RecordResult:
    """Record with the DBI recorder into the bundle directory `output` (see the module doc).
    `start`: the window opens at the first block of thread `tid` that starts at this function
    or address (the thread is followed from the beginning, and what it ran before is
    dropped). End conditions: end.count, end.until_return (needs `start`), end.duration_ms,
    `max_instructions` (a cap: a window it ends is partial), end.time_bound_s (a safety
    bound from the window's opening: partial), end.request (closed from outside: complete);
    end.until is not supported. For a debug session's window (recorder_worker.py):
    `on_attached()` once the thread is followed, `at_drain()` after each drain (it may close
    the window through end.request), `stage(name)` at "recorder set up" and "target released"
    (the thread has left the recorder's code: it was never stopped), `why` the choice's reason.
    Raises RecordFailed (with the partial bundle's path when one was written) and
    dbi.DbiUnavailable (nothing was done: the caller may use another recorder)."""
    end = end or EndCondition(count=100_000)
    if end.until is not None or end.until_spec:
        raise RecordFailed("the DBI recorder cannot end a window at an address (--until); "
                           "use --count, --until-return or --duration")
    if end.until_return and not start:
        raise RecordFailed("--until-return needs --from (the function whose return ends it)")
    frida = dbi.frida_module()
    from adapter.capture.recorders import DBI_CAVEAT
    log(DBI_CAVEAT)
    launched = None
    if command:
        try:
            launched = frida.spawn(command)
        except Exception as exc:  # noqa: BLE001 - frida's own error types
            raise RecordFailed(f"cannot start {command[0]}: {exc}") from None
        pid = launched
    elif pid is None:
        pid = _pid_of(tid)
    tid = tid or pid
    try:
        session = dbi.DbiSession(pid, log)
    except dbi.DbiUnavailable:
        if launched is not None:
            os.kill(launched, 9)
            os.waitpid(launched, 0)
        raise
    writer = None
    window = None
    result = None
    partial = None
    reason = ""
    try:
        writer = BundleWriter(output, "dbi", cpu_mod.cpu_id().as_manifest(),
                              timing=dict(dbi.TIMING), command=command, pid=pid,
                              copy_images=False)
        images = _Images(pid)
        start_in = None
        if start:
            at = _resolve(pid, start)
            start_in = (at, at + 1)
        if launched is not None:
            # Stalker cannot follow a thread Frida's spawn holds: the program is let go first
            # and followed a moment later (its first milliseconds, the dynamic loader's, are
            # not recorded; docs/recording.md)
            frida.resume(launched)
        window = session.window(tid, start_in=start_in)
        log(f"recording thread {tid} of process {pid} with Frida Stalker ({session.repair})")
        if on_attached is not None:
            on_attached()
        limit = min(x for x in (end.count, max_instructions) if x) if (
            end.count or max_instructions) else 0
        began = time.monotonic()
        opened_at = None
        while True:
            result = window.drain(limit, end.until_return)
            if any(not images.covers(start) for start in result.new_starts):
                images.refresh()
            if window.opened and opened_at is None:
                opened_at = time.monotonic()
                if stage is not None:
                    stage("recorder set up")
            if at_drain is not None:
                at_drain()
            if result.stop != be.STOP_NONE:
                reason = ("the --from function returned" if result.stop == be.STOP_RETURN
                          else f"{window.encoder.instructions} instructions")
                if result.stop == be.STOP_COUNT and not (
                        end.count and window.encoder.instructions >= end.count):
                    partial = f"the instruction limit ({limit}) ended the window"
                break
            if session.table_full():
                partial = reason = "the recorder's block table is full"
                break
            if end.duration_ms is not None and opened_at is not None and (
                    time.monotonic() - opened_at) * 1000 >= end.duration_ms:
                reason = f"{end.duration_ms:g} ms"
                break
            if end.time_bound_s is not None and opened_at is not None and (
                    time.monotonic() - opened_at) >= end.time_bound_s:
                partial = reason = f"time bound of {end.time_bound_s:g} s reached"
                break
            if end.request is not None and end.request.reason:
                reason = end.request.reason
                break
            if not window.opened and trigger_timeout is not None and (
                    time.monotonic() - began) > trigger_timeout:
                raise RecordFailed(f"no thread reached {start} within {trigger_timeout:g} s")
            if session.messages:
                raise RecordFailed(f"the DBI agent failed: {session.messages[0]}")
            if not _alive(pid, launched is not None):
                window.drain(limit, end.until_return)
                partial = reason = "the program exited before the window's end"
                break
            if result.new_starts:
                images.snapshot_used(sorted(result.new_starts))
            time.sleep(POLL_S)
    except KeyboardInterrupt as exc:
        partial = reason = str(exc) or "interrupted by the user"
    except (dbi.DbiError, OSError) as exc:
        partial = reason = f"the recorder failed: {exc}"
    finally:
        settled = True
        if window is not None:
            settled = window.stop_following()
        images_ok = window is not None and _alive(pid, launched is not None)
        if images_ok:
            images.refresh()
            images.snapshot_used(sorted(window.starts))
        session.close(unmap=settled)
        if stage is not None:
            stage("target released")
        if not settled:
            log("the recorded thread was still in Stalker's code 10 s after the window ended: "
                "the recorder's ring stays mapped in the process (unmapping it would kill it)")
    if writer is None:
        raise RecordFailed("could not create the bundle")
    stream = window.finish(result)
    writer.add_stream_bytes(tid, stream, pid=pid)
    writer.add_thread(tid, pid, _comm(tid))
    starts = sorted(window.starts)
    warnings = images.write(writer, starts)
    enc = window.encoder
    seconds = (time.monotonic_ns() - window.started_ns) / 1e9
    writer.manifest["recorder"] = {"name": "dbi", "why": why,
                                   "frida": dbi.FRIDA_VERSION, "avx512": session.repair}
    writer.manifest["stats"] = {
        "instructions": enc.instructions, "blocks": enc.blocks,
        "distinct_blocks": len(session.blocks), "discontinuities": enc.discontinuities,
        "seconds": round(seconds, 6), "end_reason": reason, "warnings": warnings,
        "recorder": "dbi"}
    manifest = writer.finish(partial)
    if copy_images:
        manifest = copy_images_in(output, used_ips=starts)
    exit_code = None
    if launched is not None and wait_for_exit:
        status = _alive.exit_status.pop(pid, None)
        if status is None:
            _pid, status = os.waitpid(pid, 0)
        exit_code = _exit_code(status)
    if partial and not enc.instructions:
        raise RecordFailed(f"nothing was recorded: {partial}", bundle=output)
    return RecordResult(output, manifest, None, exit_code)


def _pid_of(tid: int | None) -> int:
    if tid is None:
        raise RecordFailed("give a command, a pid or a tid")
    try:
        return tgid_of(tid)
    except TargetError as exc:
        raise RecordFailed(str(exc)) from None
