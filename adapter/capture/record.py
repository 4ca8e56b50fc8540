"""One stepper recording, end to end: get hold of the target, wait for the
trigger, record the thread, turn the path into Intel PT, write the bundle,
and let the target go whatever happened.

Layer: adapter.capture (policy of the stepper backend). It strings together
target.py (ptrace attachment), stepper.py (the recorder), pt_decoder's
FlowEncoder (PT packets) and bundle.py (storage); the `ptdebug record`
command line and the DAP recorder call `record_stepper`. Guarantees, in this
order, on every exit path: the target is detached with its debug registers
cleared (never left stopped or traced), the bundle directory exists with a
manifest that says "complete" or "partial" and why.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import traceback
from array import array

from adapter.capture import stepper as stepper_mod
from adapter.capture.bundle import BundleWriter
from adapter.capture.live_encoding import LiveEncoding, timed_flow_encoder
from adapter.capture.oom_shield import shielded_from_oom_killer
from adapter.capture.process_images import PROCESS_IMAGES, FileMapping
from adapter.capture.target import Target, TargetError
from adapter.hw import cpu as cpu_mod
from adapter.hw import ptrace as pt
from adapter.hw.exec_breakpoints import BreakpointError
from adapter.hw.signals import interrupts_noted, signals_held

# The stepper's clock: CLOCK_MONOTONIC nanoseconds stand in for the TSC (1 GHz).
# A 25 MHz crystal clock (CPUID 0x15 = 1/40 of the TSC) and a core clock equal to
# the TSC (CBR = nom_freq = 10 x 100 MHz) make MTC and CYC consistent with it.
TIMING = {"tsc_hz": 1_000_000_000,
          "tsc_source": "CLOCK_MONOTONIC ns read by the stepper at each stop of the thread; "
                        "instructions between two stops carry the earlier stop's time",
          "mtc_freq": 6, "nom_freq": 10, "cpuid_0x15_eax": 1, "cpuid_0x15_ebx": 40,
          "cyc": True, "cyc_thresh": 0, "cycles_per_unit": "1 CYC = 1 ns"}


class RecordFailed(Exception):
    """Recording failed; `bundle` is the (partial) bundle kept, or None.
    `program`: a launched program let go and still to be waited for (its
    `wait()` gives the exit code, or -signal), or None; `killed_program`: the
    pid of a launched program ptdebug ended because its recording never began."""

    def __init__(self, message: str, bundle: str | None = None, program=None,
                 killed_program: int | None = None):
        super().__init__(message)
        self.bundle = bundle
        self.program = program
        self.killed_program = killed_program


@dataclasses.dataclass
class RecordResult:
    bundle: str
    manifest: dict
    recording: stepper_mod.Recording | None
    target_exit: int | None = None


def _disk_message(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return f"the disk is full ({os.strerror(exc.errno)}) while writing the bundle"
    return f"writing the bundle failed: {exc}"


def _add_images(writer: BundleWriter, pid: int, known: set) -> list[str]:
    """Every executable mapping of the process into the bundle (files referenced, looked at
    once per recorder: process_images.py; anonymous code snapshotted), and its perf map;
    returns warnings."""
    try:
        mappings = PROCESS_IMAGES.mappings(pid)
    except OSError as exc:  # the process may have exited
        return [f"cannot read the mappings of {pid}: {exc.strerror or exc}"]
    warnings = []
    memory = None
    try:
        for mapping in mappings:
            if isinstance(mapping, FileMapping):
                key = (mapping.address, mapping.size, mapping.path)
                if key not in known:
                    known.add(key)
                    writer.add_image(mapping.path, mapping.address, mapping.offset,
                                     mapping.size, build_id=mapping.build_id, kind="elf",
                                     pid=pid)
                continue
            try:
                if memory is None:
                    memory = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115
                memory.seek(mapping.address)
                data = memory.read(mapping.end - mapping.address)
            except OSError as exc:
                warnings.append(f"cannot read {mapping.name} at {mapping.address:#x}-"
                                f"{mapping.end:#x} from /proc/{pid}/mem: {exc.strerror}")
                continue
            key = (mapping.address, len(data), mapping.name)
            if key in known:
                continue
            known.add(key)
            label = mapping.name.strip("[]") or "anon"
            writer.add_snapshot(f"{label}-{mapping.address:x}.bin", mapping.address, data,
                                pid=pid, origin=mapping.name)
    finally:
        if memory is not None:
            memory.close()
    # the names of JIT code (CPython 3.12+ under -X perf: its trampolines) as they are now
    return warnings + writer.add_perf_map(pid)


def _python_probe(pid: int, required: bool, log):
    """The Python frame probe of process `pid`; None (said in the log) when it runs no
    supported CPython, unless `required` (then TargetError)."""
    from adapter.python.cpython_layout import LayoutError
    from adapter.python.frame_probe import probe_for
    try:
        return probe_for(pid)
    except LayoutError as exc:
        if required:
            raise TargetError(f"no Python attribution: {exc}") from None
        log(f"no Python attribution: {exc}")
        return None


def _open_at_python_line(target: Target, tid: int, probe, line: tuple[str, int],
                         ends: dict | None, end: stepper_mod.EndCondition,
                         timeout: float | None, log) -> str | None:
    """Run thread `tid` to where it runs Python line `line` = (path, line) again (see
    record_stepper's `python_start`), and have the probe close the window as `ends` says.
    Returns the line's description ("handle (service.py:30)"), which the window opens before
    (at the line, or where the thread stands when it cannot be run there); None when the
    thread has no frame at the line (the window then opens where it stands)."""
    from adapter.python.line_window import PythonWindowEnd, find_entry, run_to_entry
    path, number = line
    try:
        entry = find_entry(probe, pt.getregs(tid).fs_base, path, number)
    except (OSError, ValueError) as exc:
        entry = None
        log(f"the thread's Python frames could not be read ({exc})")
    if entry is None:
        log(f"the thread does not run {os.path.basename(path)}:{number}; the window opens "
            "where it stands")
        return None
    request = end.request if end.request is not None else stepper_mod.EndRequest()
    end.request = request
    ends = ends or {}
    if ends.get("return") or ends.get("lines"):
        # also where the window opens where the thread stands (below): the entry's frame is
        # under the debugger's, and it is the one whose return or lines end the window
        probe.window_end = PythonWindowEnd(request, entry.where,
                                           depth=entry.depth if ends.get("return") else None,
                                           lines=ends.get("lines"), entry_depth=entry.depth)
    if stepper_mod.OTHER_BREAKPOINT_SLOTS >= 4:
        # data breakpoints hold every debug register: a perf breakpoint opened beside them
        # was seen not to fire (the thread ran past the line unseen); the window opens
        # where the thread stands, as the stepper then steps every instruction anyway
        log("the window opens where the thread stands: data breakpoints hold every debug "
            "register")
        return entry.where
    try:
        run_to_entry(target, tid, probe, entry, timeout=timeout or 10.0,
                     stop_asked=lambda: request.reason, clock=request.wait_clock)
    except OSError as exc:
        log(f"the window opens where the thread stands, not at {entry.where}: {exc}")
        return entry.where
    log(f"the window opens at {entry.where}")
    return entry.where


def encode_recording(rec: stepper_mod.Recording, read_code) -> bytes:
    """The Recording as a PT stream (PSB+ every 4 KiB, timing from the stops)."""
    n = len(rec.ips)
    if n == 0:
        return b""
    tscs = array("Q", bytes(8 * n))
    stamps = rec.stamps or [(0, rec.started_ns)]
    for k, (index, ns) in enumerate(stamps):
        stop = stamps[k + 1][0] if k + 1 < len(stamps) else n
        for i in range(min(index, n), min(stop, n)):
            tscs[i] = ns
    first = stamps[0][1]
    for i in range(min(stamps[0][0], n)):
        tscs[i] = first
    ptw = {i: v for i, v in rec.ptw if 0 <= i < n}
    fe = timed_flow_encoder(read_code, TIMING)
    return fe.encode(rec.ips, tscs=tscs, ptwrites=ptw, end_ip=rec.end_ip,
                     untraced={i: t for i, t in rec.untraced.items() if i < n})


def record_stepper(output: str, *, command: list[str] | None = None, pid: int | None = None,
                   tid: int | None = None, start: str | None = None,
                   end: stepper_mod.EndCondition | None = None, predict_returns: bool = True,
                   copy_images: bool = True, ptw_probe=None, no_aslr: bool = False,
                   trigger_timeout: float | None = None, env: dict | None = None,
                   wait_for_exit: bool = True, breakpoints: str = "auto",
                   output_fd: int | None = None, max_instructions: int = 50_000_000,
                   log=lambda msg: None, on_attached=None,
                   before_release=None, python: str = "off", python_lines=None,
                   stage=lambda name: None, release_first: bool = False,
                   python_start: tuple[str, int] | None = None,
                   python_end: dict | None = None) -> RecordResult:
    """Record with the ptrace stepper into the bundle directory `output`.
    `breakpoints`: "int3", "dr" or "auto" (planted INT3 bytes for a program
    ptdebug launched that has one thread, since they stop twice as fast; debug
    registers otherwise, which patch nothing and leave other threads alone).
    `on_attached()` is called once the target is held (its threads stopped), before the
    trigger is awaited: a debugger that had the thread paused can let it go then (DAP record
    breakpoints). `before_release(tid, ip)` is called when the window has closed with the
    recorded thread alive and stopped at `ip`, before it is let go (a debugger that must take
    the program back can have it held there). `max_instructions` caps every end condition
    (the bundle is partial when it is what ended the recording). Raises RecordFailed (with the
    partial bundle's path when one was written). A launched program is killed only when its
    recording could not begin for a reason other than an interruption (Ctrl-C, SIGTERM);
    otherwise it is let go to run on, and waited for when `wait_for_exit` (on failure the
    caller waits, through RecordFailed.program). `python`: "auto" writes Python frame samples
    (adapter/python/frame_probe.py) when the target runs CPython, "on" requires it, "off"
    never (a `ptw_probe` given wins); `python_lines`: (close, watch), the (path, line) pairs at
    which the window closes (through `end.request`) or that it watches, with the probe
    (frame_probe.LineStops; the manifest's python.line_stops says what it met). `stage(name)` is called as each step ends (the DAP
    recorder times them in the adapter's log). `release_first`: the target is let go as soon
    as the window has closed, and only then are its mappings read into the bundle and the
    path encoded (both take hundreds of milliseconds, which a thread held by a DAP record
    breakpoint would otherwise wait): code mapped and unmapped during the window, or code of a
    process that exits right after it, may then be missing from the bundle.
    `python_start`: (path, line) of a Python line the thread `tid` is stopped at (a debugger's
    breakpoint): the window opens when the thread runs that line's code again, after the
    debugger's own code (adapter/python/line_window.py); `python_end`: {"return": bool,
    "lines": N or None}, the window also closes when that Python function returns, or after
    N Python lines. Where the line is not found in the thread's stack, the window opens at
    once (the log says so)."""
    if python not in ("auto", "on", "off"):
        raise RecordFailed(f"python must be auto, on or off, not {python!r}")
    end = end or stepper_mod.EndCondition(count=100_000)
    if end.until_return and not start:
        raise RecordFailed("--until-return needs --from (the function whose return ends it)")
    cpu = cpu_mod.cpu_id().as_manifest()
    try:
        writer = BundleWriter(output, "stepper", cpu, timing=dict(TIMING), command=command,
                              pid=pid, copy_images=copy_images)
    except OSError as exc:
        raise RecordFailed(_disk_message(exc)) from None
    if max_instructions <= 0:
        raise RecordFailed(f"the instruction limit must be positive, not {max_instructions}")
    target = None
    rec = None
    partial = None
    failure = None
    began = interrupted = False
    killed = None
    shield = contextlib.ExitStack()  # until every thread is let go (capture/oom_shield.py)
    shield.enter_context(shielded_from_oom_killer(log))
    try:
        if command:
            target = Target.launch(command, env=env, no_aslr=no_aslr, output_fd=output_fd)
        else:
            target = Target.attach(pid=pid, tid=tid)
        writer.manifest["pid"] = target.pid
        stage("thread held")
        if on_attached is not None:
            on_attached()
        entry_rsp = return_address = None
        python_probe = None
        line_ahead = None  # the Python line the window opens before
        if python_start and not start and python != "off" and ptw_probe is None:
            # (a launched program has no interpreter mapped yet: its probe is built later)
            python_probe = ptw_probe = _python_probe(target.pid, python == "on", log)
        if python_probe is not None:
            line_ahead = _open_at_python_line(target, tid, python_probe, python_start,
                                              python_end, end, trigger_timeout, log)
            stage("thread at the Python line")
        if start:
            addr = target.resolve(start)
            log(f"waiting for a thread of {target.pid} to reach {start} ({addr:#x})")
            rec_tid = target.run_to(addr, timeout=trigger_timeout)
            regs = pt.getregs(rec_tid)
            entry_rsp = regs.rsp
            with pt.Memory(rec_tid) as mem:
                return_address = mem.read_u64(regs.rsp)
        else:
            rec_tid = tid if tid is not None else target.pid
            if rec_tid not in target.threads:
                raise TargetError(f"thread {rec_tid} is not traced")
        if end.until is None and end.until_spec:
            end.until = target.resolve(end.until_spec)
        if breakpoints == "int3" and len(pt.threads_of(target.pid)) > 1:
            raise TargetError("--breakpoints int3 needs a single-threaded target (another "
                              "thread would die on a planted INT3); use dr")
        if breakpoints == "auto":
            single = len(pt.threads_of(target.pid)) == 1
            breakpoints = "int3" if target.launched is not None and single else "dr"
        target.keep_only(rec_tid, follow_clones=breakpoints == "int3")
        comm = _comm(rec_tid)
        writer.add_thread(rec_tid, target.pid, comm)
        known: set = set()
        if not release_first:
            for warning in _add_images(writer, target.pid, known):
                log(f"warning: {warning}")
            stage("images listed")
        writer.write_manifest()
        if python != "off" and ptw_probe is None:
            python_probe = ptw_probe = _python_probe(target.pid, python == "on", log)
        if python_probe is not None and python_lines is not None:
            from adapter.python.frame_probe import LineStops
            close, watch = python_lines
            python_probe.watch_lines(LineStops(
                frozenset(close), frozenset(watch),
                end.request if end.request is not None else stepper_mod.EndRequest()))
        elif python_lines is not None and any(python_lines):
            log("the window does not watch the Python breakpoints' lines (no probe); "
                "only the debugger's stops close it")
        go_window = None
        if ptw_probe is None:  # a Go program: its goroutine kept on the thread, ids recorded
            from adapter.golang.recording import GoWindow
            go_window = ptw_probe = GoWindow.for_process(target.pid)
        hold = getattr(ptw_probe, "hold", None)  # a Go goroutine locked to the thread
        debugger_code = None
        if python_probe is not None:  # the debugger's tracer runs unrecorded (debugger_code.py)
            from adapter.python.debugger_code import DebuggerCode
            debugger_code = DebuggerCode.of_process(target.pid, python_probe)
        if end.request is None:  # (how an interrupt closes the window, interrupts_noted)
            end.request = stepper_mod.EndRequest()
        recorder = stepper_mod.ThreadRecorder(rec_tid, target.pid, end,
                                              predict_returns=predict_returns,
                                              ptw_probe=ptw_probe, entry_rsp=entry_rsp,
                                              return_address=return_address,
                                              breakpoints=breakpoints,
                                              max_instructions=max_instructions,
                                              withheld_signals=getattr(
                                                  ptw_probe, "withheld_signals", frozenset()),
                                              hold=hold, untraced_calls=debugger_code)
        # the window is encoded while the thread runs between stops (live_encoding.py)
        live = LiveEncoding(recorder.rec, recorder.code.read_code, TIMING)
        recorder.while_running = live.step
        log(f"recording thread {rec_tid}")
        stage("recorder set up")
        began = True
        interrupt = None
        try:
            with interrupts_noted(lambda signum: end.request.end(
                    "interrupted by the user" if signum == signal.SIGINT
                    else f"stopped by {signal.Signals(signum).name}")) as noted:
                rec = recorder.run()
            if noted:  # its KeyboardInterrupt was swallowed: the window closed at the request
                raise KeyboardInterrupt(end.request.reason or "interrupted by the user")
        except KeyboardInterrupt as exc:
            # Ctrl-C, SIGTERM, or the adapter ending a window it gave up on: what was recorded
            # up to there is kept, encoded like any partial window, and the interrupt goes on
            # once the bundle holds it (before, the bundle of an interrupted window was empty).
            # Its reason is the first one asked: an adapter that asks the window to close
            # before it interrupts the recorder says why (a watchdog is not "the user", issue
            # 34), and the interrupt itself notes "interrupted by the user" only when nothing
            # was asked before
            rec = recorder.rec
            rec.reason = rec.partial_reason = (end.request.reason or str(exc)
                                               or "interrupted by the user")
            interrupt = KeyboardInterrupt(rec.reason)
        finally:
            if go_window is not None:
                go_window.release()  # preempted as usual again, whatever happened
            if hold is not None:  # how the goroutine's lock ended, also when cut short
                hold.close()
                writer.manifest.setdefault("go", {})["thread_lock"] = hold.describe()
                if hold.state.startswith("left locked"):
                    log(hold.describe())
            if not recorder.alive:
                target.threads.pop(rec_tid, None)
                if recorder.exit_status is not None and target.launched is not None \
                        and rec_tid == target.launched.pid:
                    target.launched.status = recorder.exit_status.raw  # reaped by the recorder
            elif recorder.pending_signal:
                target.keep_signal(rec_tid, recorder.pending_signal)
        partial = rec.partial_reason
        stage(f"window recorded ({len(rec.ips)} instructions)")
        if go_window is not None:
            go_window.close()
            writer.manifest.setdefault("go", {}).update(goroutines=go_window.describe(),
                                                        withheld_signals=recorder.withheld)
            if partial:
                partial += f" ({go_window.describe()})"
        if python_probe is not None:
            writer.manifest["python"] = python_probe.manifest_entry()
            writer.manifest["python"]["samples"] = len(rec.ptw)
            if python_probe.stops is not None:  # which breakpoint lines the window met
                writer.manifest["python"]["line_stops"] = {
                    "reached": python_probe.stops.reached,
                    "passed": sorted(python_probe.stops.passed)}
            python_probe.close()
        if not rec.ips and interrupt is None and end.request is not None \
                and end.request.reason is not None:
            # closed before its first instruction (the debugger stopped the program for
            # another thread, the user paused it: a captureNow and a pause together in the
            # fuzzer): said as when the thread is still on its way to a Python line
            # (Target.run_thread_to), not kept as an empty capture
            what = line_ahead or "the window's first instruction"
            raise TargetError(f"{end.request.reason}, before the thread ran {what}")
        if release_first:
            if recorder.alive and before_release is not None:
                before_release(rec_tid, pt.getregs(rec_tid).rip)
            with signals_held():
                target.release()
            stage("target released")
            for warning in _add_images(writer, target.pid, known):
                log(f"warning: {warning}")
            stage("images listed")
        elif recorder.alive:
            _add_images(writer, target.pid, known)  # code mapped during the recording
            if before_release is not None:
                before_release(rec_tid, pt.getregs(rec_tid).rip)
            stage("images after the window listed")
        early = live.encoded  # (encoded while the window was recorded)
        data = live.finish() if rec is recorder.rec else None
        if data is None:
            early = 0
            data = encode_recording(rec, recorder.code.read_code)
        stage(f"trace encoded ({len(rec.ips) - early} of {len(rec.ips)} instructions after "
              "the window)")
        writer.add_stream_bytes(rec_tid, data, pid=target.pid)
        stage("trace encoded and written")
        writer.manifest["stats"] = {
            "instructions": len(rec.ips), "stops": rec.stops,
            "single_steps": rec.single_steps, "signals": len(rec.async_events),
            "breakpoints": breakpoints, "breakpoints_at_end": recorder.mode,
            "seconds": round((rec.ended_ns - rec.started_ns) / 1e9, 6),
            "end_reason": rec.reason,
            "end_ip": rec.end_ip,
        }
        if rec.untraced:
            # calls into the debugger's tracer, run unrecorded: tracing off at their target,
            # on again at their return address (adapter/python/debugger_code.py)
            writer.manifest["stats"]["untraced_calls"] = len(rec.untraced)
        if interrupt is not None:
            raise interrupt
    except TargetError as exc:
        failure = str(exc)
        partial = failure
    except (pt.PtraceError, BreakpointError) as exc:
        failure = f"tracing failed: {exc}"
        partial = failure
    except OSError as exc:
        failure = _disk_message(exc)
        partial = failure
    except KeyboardInterrupt as exc:
        failure = str(exc) or "interrupted by the user"
        partial = failure
        interrupted = True
    # a bug in ptdebug: the target is let go all the same and the user is told
    except Exception as exc:  # noqa: BLE001
        log(f"internal error: {traceback.format_exc()}")
        failure = f"the recorder failed: {type(exc).__name__}: {exc}"
        partial = failure
    finally:
        with signals_held():
            if target is not None:
                target.release()
                if failure is not None and target.launched is not None and not began \
                        and not interrupted and target.launched.status is None:
                    # a program we started for a recording that never began: end it
                    _kill_quietly(target.pid)
                    target.wait_launched()
                    killed = target.pid
            if not release_first:
                stage("target released")
        shield.close()
    try:
        manifest = writer.finish(partial)
    except OSError as exc:
        raise RecordFailed(f"{_disk_message(exc)}; the bundle at {output} is marked partial",
                           output) from None
    if failure is not None:
        program = target.launched if target is not None and killed is None else None
        raise RecordFailed(failure, output, program=program, killed_program=killed)
    status = None
    if target is not None and target.launched is not None and wait_for_exit:
        status = target.wait_launched()
    return RecordResult(output, manifest, rec, status)


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def _comm(tid: int) -> str | None:
    try:
        with open(f"/proc/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None
