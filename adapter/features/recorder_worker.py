"""The recorder processes of DAP record breakpoints, kept warm: started once per session
(when the first record breakpoint is set) instead of once per capture, so that a captured
request does not wait for a Python interpreter to start and import the stepper.

Layer: features (the process side of adapter/features/record_breakpoints.py: both halves,
RecorderWorker in the adapter and `_serve` / `_record_worker` in the worker). A worker is
`python -I adapter -m adapter.features.recorder_worker` (adapter/spawn.py: isolated, as every
child ptdebug starts); it imports the recorder once, says `ready`, then reads one JSON spec a
line on its stdin and records each on its main thread (the stepper's watchdog is a SIGALRM
handler, which Python runs only there) with `_record_worker`, which prints
`attached`, `stage T NAME` lines and one JSON result line. The worker ends when its stdin
closes (the session ended, or the adapter died: a recording in progress is finished and its
bundle written first); SIGUSR1 or SIGUSR2 closes the window in progress where the thread
stands (the debugger stopped it, or it wrote a watched buffer: complete, and the worker stays
warm); SIGRTMIN+3 and +4 stop and restart the clock of a window's wait for its Python line
while the user holds the program (WAIT_SIGNALS); on SIGINT (a recording in progress ends
early, partial, and the worker exits after writing its result: a stopped recorder is never
reused), or when it is killed (the kernel then detaches the thread it traced; record_stepper
holds the thread only while tracing it and writes no byte outside INT3 mode, which DAP
captures do not use).

One worker records one capture at a time, and encodes its trace after letting the thread go;
the next capture may begin meanwhile (record_breakpoints: a record breakpoint's stop during
another capture's decoding starts its own). So a capture that takes the last idle worker
starts a spare, and at most MAX_IDLE idle workers are kept.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

from adapter.features.record_window import RecordWindow
from adapter.golang.park import Parked, in_a_file, park, unpark
from adapter.hw import procfs
from adapter.spawn import module_command

log = logging.getLogger("ptdebug.dap")
MODULE = "adapter.features.recorder_worker"
MAX_IDLE = 2
"""Workers kept warm between captures: the one that records (taken last, reused each time)
and the spare a capture starts when it takes the last idle one."""
WINDOW_END_SIGNALS = {"debugger": signal.SIGUSR1, "data breakpoint": signal.SIGUSR2,
                      "cancelled": signal.SIGRTMIN, "disconnect": signal.SIGRTMIN + 2,
                      "paused": signal.SIGRTMIN + 5, "overdue": signal.SIGRTMIN + 6}
"""Why the adapter closes a window early -> the signal that tells the worker."""
WAIT_SIGNALS = {"held": signal.SIGRTMIN + 3, "resumed": signal.SIGRTMIN + 4}
"""The program stopped for the user / runs again, while a window on a Python line waits for
its thread to run the line -> the signal that tells the worker (EndRequest.hold_wait)."""
OVERDUE_GRACE_S = 5.0
"""Seconds from the watchdog's request to close a window to its interrupt of the recorder."""
READY_TIMEOUT = 30.0
"""Seconds a new worker may take to import the recorder (a loaded 2-core machine: ~1 s)."""


class RecorderWorker:
    """One warm recorder process, adapter side."""

    def __init__(self):
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - the worker's life
        """Its stderr (a file, not a pipe: a long session's warnings never fill a pipe)."""
        self.process = subprocess.Popen(module_command(MODULE), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.errors, text=True)
        self._ready = False
        self._ready_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self.failure: str | None = None
        self.stopped = False
        """stop() was called: it exits after its recording and is not reused."""

    def wait_ready(self) -> None:
        """Block until the worker has imported the recorder (one reader at a time: the
        warm-up thread may still be waiting); raises RuntimeError if it died."""
        with self._ready_lock:
            if self._ready:
                return
            if self.failure is not None:
                raise RuntimeError(self.failure)
            readable, _, _ = select.select([self.process.stdout], [], [], READY_TIMEOUT)
            if not readable:  # (a recorder that never starts must not hold a capture)
                self.process.kill()
                self.failure = f"the recorder process did not start within {READY_TIMEOUT:g} s"
                raise RuntimeError(self.failure)
            line = self.process.stdout.readline()
            if line.strip() != "ready":
                if self.stopped:  # stop()'s SIGINT came while it imported: no error of its own
                    self.failure = ("the recording was stopped before its recorder process "
                                    "was ready")
                else:
                    self.failure = f"the recorder process did not start: {self.error_text()}"
                raise RuntimeError(self.failure)
            self._ready = True

    def send(self, spec: dict) -> None:
        with self._send_lock:  # (a warm-up's line and a capture's never interleave)
            self.process.stdin.write(json.dumps(spec) + "\n")
            self.process.stdin.flush()

    def lines(self):
        """The worker's lines for the capture in progress, up to its JSON result line
        (included); ends early if the worker is gone."""
        for line in self.process.stdout:
            yield line
            if line.startswith("{"):
                return

    def alive(self) -> bool:
        return self.process.poll() is None

    def error_text(self) -> str:
        try:
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.errors.seek(0)
            text = self.errors.read().strip()[-400:]
        except ValueError:  # closed: the session ended under the capture (close() below)
            text = ""
        code = self.process.returncode
        if text:
            return text
        if code is not None and code < 0:
            return f"the recorder process was ended by signal {-code} ({signal.Signals(-code).name})"
        return f"the recorder exited with {code}"

    def end_window(self, why: str) -> None:
        """Close the window in progress where the thread stands, complete: the thread is to
        stop for the user, and the rest would record it waiting. `why`: "debugger" (SIGUSR1:
        the debugger stopped it), "data breakpoint" (SIGUSR2: it wrote a watched buffer) or
        "cancelled" (SIGRTMIN: the user cancelled the recording's progress) or "stopped
        elsewhere" (SIGRTMIN+1: a window on a Python line that has not opened yet, while
        another thread stopped at a record breakpoint: the thread cannot run the line before
        that capture's hidden stop ends, and that stop waits for this capture) or "disconnect"
        (SIGRTMIN+2: the client is leaving; the debugger is told only once the thread is let
        go: RecordBreakpoints.let_go_before_disconnect) or "paused" (SIGRTMIN+5: the user
        paused a Go program while Delve was away for the window) or "overdue" (SIGRTMIN+6: the
        adapter's watchdog, before it interrupts the recorder: RecorderWatchdog).
        The worker stays usable; nothing happens between recordings."""
        if self.alive():
            self.process.send_signal(WINDOW_END_SIGNALS[why])

    def wait_held(self, held: bool) -> None:
        """The program was stopped for the user (`held`), or runs again, while the window
        waits for its thread to run its Python line: that wait's timeout does not run
        meanwhile (EndRequest.hold_wait)."""
        if self.alive():
            self.process.send_signal(WAIT_SIGNALS["held" if held else "resumed"])

    def stop(self) -> None:
        """End a recording early (SIGINT: the stepper stops, clears the debug registers and
        detaches, keeping a partial bundle); the worker exits after it."""
        self.stopped = True
        if self.alive():
            self.process.send_signal(signal.SIGINT)

    def overdue(self) -> None:
        """The adapter's watchdog (RecorderWatchdog): the window is asked to close with the
        true reason ("overdue"), and the recorder is interrupted OVERDUE_GRACE_S later if it
        has not ended by then. A signal sent just before SIGINT would come after it (the
        kernel delivers the lowest pending number first), and the bundle said "interrupted by
        the user" (issue 34)."""
        self.end_window("overdue")
        timer = threading.Timer(OVERDUE_GRACE_S, self.stop)
        timer.daemon = True
        timer.start()

    def close(self, timeout: float = 5.0) -> None:
        """Ask it to exit (stdin closed) and wait; killed if it does not."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.errors.close()


class RecorderWatchdog:
    """Calls `expired()` (RecorderWorker.stop) when a recording has run `seconds` without
    finishing or failing: the program must never stay held by a window that cannot close.
    The time the user holds the program while the window waits for its Python line does not
    count (`hold` .. `resume`)."""

    def __init__(self, seconds: float, expired):
        self._left = seconds
        self._expired = expired
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._since = 0.0
        self._done = False

    def resume(self) -> None:
        """Start, or go on after `hold`."""
        with self._lock:
            if self._done or self._timer is not None:
                return
            self._since = time.monotonic()
            self._timer = threading.Timer(max(self._left, 0.0), self._expired)
            self._timer.daemon = True
            self._timer.start()

    def hold(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._left -= time.monotonic() - self._since

    def cancel(self) -> None:
        with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None


class RecorderWorkers:
    """The session's warm workers."""

    def __init__(self, process_id=lambda: None):
        self._idle: list[RecorderWorker] = []
        self._busy: set[RecorderWorker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._starting = False
        self.process_id = process_id
        """() -> the pid of the program the session's captures record, None while unknown:
        each worker lists its images as soon as it is ready (adapter/capture/
        process_images.py), so that a capture reads after its window only what changed since
        (issue 33)."""

    def warm_up(self) -> None:
        """Start a worker in the background if none is idle (the first record breakpoint was
        set: its first capture should not wait for one to start)."""
        with self._lock:
            if self._idle or self._closed or self._starting:
                return
            self._starting = True
        try:  # (not under the lock: a capture may take an idle worker meanwhile)
            worker = RecorderWorker()
        finally:
            with self._lock:
                self._starting = False
        with self._lock:
            if self._closed:
                worker.close(0.1)
                return
            self._idle.append(worker)
        threading.Thread(target=self._ready_quietly, args=(worker,), daemon=True,
                         name="ptdebug-recorder-warm-up").start()

    def _ready_quietly(self, worker: RecorderWorker) -> None:
        try:
            worker.wait_ready()
            pid = self.process_id()
            if pid is not None:  # (a capture that takes it meanwhile comes after)
                worker.send({"warm_images": pid})
        except (RuntimeError, OSError, ValueError) as exc:
            worker.failure = str(exc)  # take() then starts another
            log.warning("recorder worker %s: %s", worker.process.pid, exc)

    def warm_images(self) -> None:
        """The program is known now: the idle workers list its images (_ready_quietly does it
        for those that become ready later)."""
        pid = self.process_id()
        with self._lock:
            idle = [w for w in self._idle if w._ready and w.failure is None]
        for worker in idle:
            try:
                worker.send({"warm_images": pid})
            except (OSError, ValueError) as exc:  # gone: take() starts another
                log.info("recorder worker %s: %s", worker.process.pid, exc)

    def take(self) -> RecorderWorker:
        """A ready worker for one capture (a new one if none is idle)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the session is ending")
            while self._idle:
                worker = self._idle.pop()  # the one given back last
                if worker.alive() and worker.failure is None:
                    break
                log.info("recorder worker %s is gone (%s); another starts",
                         worker.process.pid, worker.failure or worker.process.returncode)
                worker.close(0.1)
            else:
                worker = RecorderWorker()
            self._busy.add(worker)
            last = not self._idle
        if last:  # the next capture may begin while this one's trace is being encoded
            self.spare()
        try:
            worker.wait_ready()
        except Exception:
            self.give_back(worker, reusable=False)
            raise
        return worker

    def spare(self) -> None:
        """Have a worker ready for the next capture if none is idle (one is starting when a
        capture takes the last idle worker, and when a capture's thread is let go while its
        trace is still to be encoded): in the background, so that the capture does not wait."""
        threading.Thread(target=self.warm_up, daemon=True,
                         name="ptdebug-recorder-warm-up").start()

    def give_back(self, worker: RecorderWorker, reusable: bool) -> None:
        """After a capture: kept warm if `reusable` and alive and none is idle, else ended."""
        with self._lock:
            self._busy.discard(worker)
            keep = (reusable and not worker.stopped and worker.alive()
                    and len(self._idle) < MAX_IDLE and not self._closed)
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.close()

    def stop_all(self) -> None:
        """The session ends: recordings in progress end early (partial bundles), idle workers
        exit."""
        with self._lock:
            self._closed = True
            busy, idle, self._idle = list(self._busy), self._idle, []
        for worker in busy:
            worker.stop()
        for worker in idle + busy:
            worker.close()


# --- one recording, in the worker process ------------------------------------------------
ADAPTER_GONE: list = []
"""Set (in a recorder process) once its stdout is a broken pipe: the adapter is gone."""


def _say(*parts) -> None:
    """One line to the adapter (recorder process side). An adapter that is gone (killed) is no
    reason to stop: the recording goes on to its end, the target is let go and the bundle's
    manifest finished (record_stepper), and the worker then exits (recorder_worker)."""
    if ADAPTER_GONE:
        return
    try:
        print(*parts, flush=True)
    except (BrokenPipeError, ValueError):
        ADAPTER_GONE.append(True)


WINDOW_END_REQUESTS: list = []
"""The EndRequest of the recording in progress in this recorder process (at most one)."""
WINDOW_ENDS = {"debugger": "the debugger stopped the thread in the window",
               "data breakpoint": "a data breakpoint fired in the window",
               "cancelled": "the user cancelled the recording",
               "disconnect": "the client disconnected",
               "paused": "the user paused the program",
               "overdue": "the recorder had not ended in time (the adapter's watchdog)"}
"""Why the adapter closes a window early (RecorderWorker.end_window) -> the end reason."""
GOROUTINE_PARKED = "the goroutine parked (runtime.gopark)"
"""The end reason of a Go window whose goroutine parked (the adapter names the goroutine)."""


def end_window_now(why: str) -> None:
    """In the recorder process, on the adapter's signal (RecorderWorker.end_window): close the
    window in progress, complete, where the thread stands."""
    for request in WINDOW_END_REQUESTS:
        request.end(WINDOW_ENDS[why])


def wait_held_now(held: bool) -> None:
    """In the recorder process, on the adapter's signal (RecorderWorker.wait_held)."""
    for request in WINDOW_END_REQUESTS:
        if held:
            request.hold_wait()
        else:
            request.resume_wait()


def _record_worker(spec_text: str) -> int:
    """The child process of `_record`: one stepper recording of a thread into a bundle. Prints
    `attached` once the thread is held, then one JSON line: the result or {"error": text}."""
    from adapter.capture.record import RecordFailed, record_stepper
    spec = json.loads(spec_text)
    from adapter.capture import stepper
    stepper.OTHER_BREAKPOINT_SLOTS = int(spec.get("held_slots") or 0)  # data breakpoints'
    request = stepper.EndRequest()
    python_lines = None
    if spec.get("python_lines"):
        lines = spec["python_lines"]
        python_lines = ({tuple(w) for w in lines["close"]}, {tuple(w) for w in lines["watch"]})
    window = RecordWindow(**spec["window"])
    tid = spec["tid"]
    probe = None
    end_at: dict[int, str] = {}
    if spec.get("goid_probe"):
        from types import SimpleNamespace

        from adapter.golang.recording import GoWindow
        from adapter.golang.stepper_probe import GoidProbe
        from adapter.golang.thread_lock import GoroutineLock, LockLayout
        where = dict(spec["goid_probe"])
        lock = where.pop("lock", None)
        park_at = where.pop("park_at", None)
        if park_at:
            # the goroutine parks: Delve is to come back at once (issue 34; docs/go.md,
            # "When the goroutine parks")
            end_at[park_at] = GOROUTINE_PARKED
        probe = GoidProbe(_tgid(tid), SimpleNamespace(**where))
        # Go's preemption signal is not delivered in the window, and the goroutine is locked
        # to its thread for it (adapter/golang/recording.py)
        probe.withheld_signals = GoWindow.withheld_signals
        probe.hold = GoroutineLock(_tgid(tid), LockLayout(**lock)) if lock else None

    def attached() -> None:
        if spec.get("parked"):
            # the thread was spinning on `jmp .` (DelveBackend.hand_over); held now, it may
            # have its instruction back and be recorded from there
            unpark(Parked.from_json(spec["parked"]))
        _say("attached")

    stop_at = frozenset(spec.get("stop_at") or ())
    stopped_at = []

    def before_release(thread: int, ip: int) -> None:
        if ip in stop_at:
            stopped_at.append(ip)
        if spec.get("parked") and ip not in end_at and in_a_file(_tgid(thread), ip):
            # held where the window closed until the debugger is back (_capture unparks it);
            # not at runtime.gopark, which every goroutine of the program calls: the thread
            # goes on into it and the goroutine parks as without ptdebug; nor in code that is
            # no file's (the vDSO, JIT code): the bundle snapshots that code after the release,
            # and it held the `jmp .`, on which the decoder walked for ever (a window closed
            # in the vDSO's clock_gettime, issue 34's cancel test)
            _say("parked", json.dumps(park(_tgid(thread), ip).to_json()))

    WINDOW_END_REQUESTS[:] = [request]
    recorder = dict(spec.get("recorder") or {"name": "stepper", "why": "the stepper"})
    result = None
    if recorder["name"] == "dbi":
        from adapter.capture.dbi import DbiUnavailable
        from adapter.features import dbi_window
        try:
            result = dbi_window.record(spec, window, request, pid=_tgid(tid),
                                       attached=attached, say=_say, why=recorder["why"])
        except DbiUnavailable as exc:
            # found at attach, before the thread was touched: the stepper records instead,
            # and the adapter tells the user why (record_breakpoints: `recorder.fallback`)
            window = dataclasses.replace(window, dbi=False)  # (the stepper's caps)
            recorder = {"name": "stepper", "fallback": str(exc),
                        "why": f"DBI was asked for, but {exc}: the ptrace stepper records "
                               "instead"}
        except RecordFailed as exc:
            WINDOW_END_REQUESTS.clear()
            _say(json.dumps({"error": str(exc), "recorder": recorder}))
            return 1
    try:
        result = result or record_stepper(spec["output"], tid=tid, start=window.function,
                                end=dataclasses.replace(window.end_condition(), stop_at=stop_at,
                                                        end_at=end_at, request=request),
                                trigger_timeout=window.timeout,
                                copy_images=False, breakpoints="dr", ptw_probe=probe,
                                python=spec.get("python") or "off", python_lines=python_lines,
                                python_start=(tuple(spec["python_start"])
                                              if spec.get("python_start") else None),
                                python_end=window.python_ends if window.python_line else None,
                                on_attached=attached, before_release=before_release,
                                stage=lambda name: _say("stage", time.monotonic(), name),
                                release_first=True,
                                log=lambda text: _say("log", text.replace("\n", "\\n")))
    except RecordFailed as exc:
        _say(json.dumps({"error": str(exc), "recorder": recorder}))
        return 1
    finally:
        WINDOW_END_REQUESTS.clear()
    stats = result.manifest.get("stats") or {}
    line_stops = (result.manifest.get("python") or {}).get("line_stops") or {}
    _say(json.dumps({"end_reason": stats.get("end_reason", ""),
                      "partial_reason": result.manifest.get("partial_reason"),
                      "stopped_at": stopped_at[0] if stopped_at else None,
                      "python_stop": line_stops.get("reached"),
                      # (not a request that came after the window had ended on its own:
                      # "closed early" was told of windows that had recorded their whole cap)
                      "closed_by": next((why for why, reason in WINDOW_ENDS.items()
                                         if request.reason == reason
                                         and stats.get("end_reason") == reason), None),
                      "python_passed": line_stops.get("passed") or [],
                      "recorder": recorder,
                      "thread_lock": (result.manifest.get("go") or {}).get("thread_lock")}))
    return 0


def preload_recorder() -> None:
    """What a recording imports, imported ahead (a warm recorder process, before its first
    capture)."""
    import adapter.capture.record  # noqa: F401
    import pt_decoder.image  # noqa: F401


def _warm_images(pid: int) -> None:
    """List the images of the program the next captures record (nothing is printed: the
    adapter reads this worker's lines only for a capture). A program that cannot be read now
    is read at its capture, which says why then."""
    from adapter.capture.process_images import PROCESS_IMAGES
    try:
        PROCESS_IMAGES.mappings(pid)
    except OSError:
        pass


def _tgid(tid: int) -> int:
    tgid = procfs.status(tid).tgid
    if tgid is None:
        raise OSError(f"no thread {tid}")
    return tgid


def _serve() -> int:
    """The worker's main loop (see the module docstring)."""
    preload_recorder()
    interrupted = []

    def on_interrupt(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)
    # set before `ready`: a worker is given recordings only once ready
    for why, signum in WINDOW_END_SIGNALS.items():
        signal.signal(signum, lambda _signum, _frame, why=why:
                      end_window_now(why))
    for what, signum in WAIT_SIGNALS.items():
        signal.signal(signum, lambda _signum, _frame, held=what == "held": wait_held_now(held))
    try:
        print("ready", flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            if line.startswith('{"warm_images"'):
                _warm_images(json.loads(line)["warm_images"])
                continue
            _record_worker(line)
            if interrupted or ADAPTER_GONE:
                return 1
    except (KeyboardInterrupt, BrokenPipeError):
        return 1
    return 0


if __name__ == "__main__":
    try:
        status = _serve()
    except BrokenPipeError:  # the adapter is gone
        status = 1
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.exit(status)
