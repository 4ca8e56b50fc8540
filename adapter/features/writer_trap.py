"""Stopping a Python writer at the instruction after its write: the debuggee side of ptdebug's
data breakpoints, sent as source text through debugpy's `evaluate`.

Layer: features (helper of data_breakpoints). Pure functions and constants; no I/O, no DAP.

What the hardware gives: the watchpoint's perf event is opened with `sigtrap` (Linux 5.13+,
perf_event_open(2)), so at the debug exception of the write (a trap: the write is done, SDM Vol.
3B §17.3.1.2) the kernel sends SIGTRAP to the very thread that wrote, synchronously, before it
runs one more instruction, with `si_code` TRAP_PERF and the event's `sig_data` in
`si_perf_data`. ptdebug installs a C-level SIGTRAP handler in the debuggee (ctypes `sigaction`:
Python's own `signal` handlers run later, on the main thread). It runs in the writing thread,
inside the C code that wrote, holding the GIL that code held (a ctypes callback takes it if the
code had let it go). The Python frame below it is the writer's, at the line that wrote (CPython
records the instruction being run in the frame). The handler asks pydevd to suspend this
thread there, exactly as pydevd does at a breakpoint (`set_suspend` then `do_wait_suspend`
with that frame, other threads suspended or not as `stopAllThreadsOnSuspend` says), with
`hitBreakpointIds` [TRAP_MARK, watch id, OS thread id] on a `function breakpoint` stop so the
adapter can tell it from any other and rewrite it. The thread waits there (GIL released by
pydevd's wait loop, so debugpy works) until the user continues; what it does next (block in C,
exit) cannot happen before.

Not stopped, and reported by the adapter from the perf sample instead: a write by a thread
already suspended (the user's `evaluate`), one that came while SIGTRAP was blocked (the
kernel marks it asynchronous, TRAP_PERF_FLAG_ASYNC), pydevd's own threads, and a thread with
no Python frame (a native thread). A SIGTRAP that is not ptdebug's goes to the handler that
was there before (the default one: re-raised after restoring it).

Latency: pydevd writes to debugpy's adapter on a TCP socket without TCP_NODELAY. A stop that
follows the `continued` event by less than the peer's delayed-ACK time (40 ms on Linux) was
held back by Nagle's algorithm until that ACK came: 42 ms of a 45 ms write -> `stopped`
measured on a writer that loops. `install` sets TCP_NODELAY on pydevd's socket (as pydevd
itself does before a process is replaced); the events are whole messages, so nothing is lost.

`uninstall` restores the previous SIGTRAP action. The handler's trampoline itself stays
referenced in `sys.modules['_ptdebug_trap']`: a thread may still be suspended inside it, and
freeing the code it will return into would crash the program.
"""
from __future__ import annotations

TRAP_MARK = 0x70746462
"""First hitBreakpointId of a pydevd stop made by the handler ("ptdb")."""
SIG_DATA_BASE = TRAP_MARK << 32
"""perf `sig_data` of a watch: SIG_DATA_BASE | watch id; the handler checks the high half."""
TRAP_PERF = 6
"""si_code of a perf event's SIGTRAP (<asm-generic/siginfo.h>)."""

TRAP_SOURCE = '''
def install(mark, stop_all):
    import ctypes, sys, threading, types
    trap = sys.modules.get("_ptdebug_trap")
    if trap is None:
        trap = types.ModuleType("_ptdebug_trap")
        trap.errors = []
        class SigAction(ctypes.Structure):  # struct sigaction, glibc x86-64
            _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                        ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]
        handler_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
        libc = ctypes.CDLL(None, use_errno=True)

        def chain(signo, info, context):
            old = trap.previous.handler or 0
            if old == 1:  # SIG_IGN
                return
            if old == 0:  # SIG_DFL: as if ptdebug were not there
                libc.sigaction(5, ctypes.byref(trap.previous), None)
                import signal
                signal.pthread_kill(threading.get_ident(), 5)
                return
            handler_type(old)(signo, info, context)

        def on_trap(signo, info, context):
            try:
                code = ctypes.c_int.from_address(info + 8).value
                data = ctypes.c_uint64.from_address(info + 24).value
                flags = ctypes.c_uint32.from_address(info + 36).value
                if code != TRAP_PERF_CODE or data >> 32 != trap.mark:
                    return chain(signo, info, context)
                if flags & 1 or not trap.enabled:  # asynchronous: not the writer at its write
                    return
                frame = sys._getframe(1)
                thread = threading.current_thread()
                if frame is None or getattr(thread, "is_pydev_daemon_thread", False):
                    return
                import pydevd
                from _pydevd_bundle.pydevd_additional_thread_info import (
                    set_additional_thread_info)
                from _pydevd_bundle.pydevd_comm_constants import CMD_SET_FUNCTION_BREAK
                from _pydevd_bundle.pydevd_constants import STATE_SUSPEND
                debugger = pydevd.get_global_debugger()
                if debugger is None:
                    return
                info_ = set_additional_thread_info(thread)
                if info_.pydev_state == STATE_SUSPEND or getattr(info_, "is_in_wait_loop", 0):
                    return  # already suspended: a write of the user's evaluate
                info_.hit_breakpoint_ids = [trap.mark, data & 0xffffffff,
                                            threading.get_native_id()]
                debugger.set_suspend(thread, CMD_SET_FUNCTION_BREAK,
                                     suspend_other_threads=trap.stop_all)
                debugger.do_wait_suspend(thread, frame, "line", None)
            except BaseException as exc:  # never out of a signal handler; the adapter says
                trap.errors.append(repr(exc))

        trap.SigAction, trap.libc, trap.mark = SigAction, libc, mark
        trap.callback = handler_type(on_trap)

        def uninstall():
            trap.enabled = False
            if trap.installed:
                libc.sigaction(5, ctypes.byref(trap.previous), None)
                trap.installed = False
            return "uninstalled"
        trap.uninstall = uninstall
        trap.installed = False
        sys.modules["_ptdebug_trap"] = trap
    trap.stop_all = stop_all
    trap.enabled = True
    try:  # a stop must not wait for an ACK (see Latency in the header)
        import pydevd, socket
        pydevd.get_global_debugger().writer.sock.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except Exception as exc:
        trap.errors.append("TCP_NODELAY: %r" % (exc,))
    if not trap.installed:
        action, previous = trap.SigAction(), trap.SigAction()
        action.handler = ctypes.cast(trap.callback, ctypes.c_void_p).value
        action.flags = 0x4 | 0x10000000  # SA_SIGINFO | SA_RESTART
        if trap.libc.sigaction(5, ctypes.byref(action), ctypes.byref(previous)) != 0:
            raise OSError(ctypes.get_errno(), "sigaction(SIGTRAP) failed")
        trap.previous, trap.installed = previous, True
    return "installed"
'''.replace("TRAP_PERF_CODE", str(TRAP_PERF))


def install_expression(stop_all: bool) -> str:
    """An expression that installs (or re-enables) the handler in the debuggee; evaluates to
    'installed'. Raises in the debuggee (an evaluate error) if sigaction fails."""
    return (f"(lambda ns: (exec({TRAP_SOURCE!r}, ns), ns['install']({TRAP_MARK}, "
            f"{bool(stop_all)}))[1])({{}})")


UNINSTALL_EXPRESSION = ("__import__('sys').modules['_ptdebug_trap'].uninstall() "
                        "if '_ptdebug_trap' in __import__('sys').modules else 'uninstalled'")
"""Restores the SIGTRAP action found at install (see the header for what stays)."""

ERRORS_EXPRESSION = ("__import__('sys').modules['_ptdebug_trap'].errors[-3:] "
                     "if '_ptdebug_trap' in __import__('sys').modules else []")
"""The handler's last failures, for the message of a hit that did not stop."""


def sig_data(watch_id: int) -> int:
    return SIG_DATA_BASE | watch_id


def held_stop(body: dict) -> tuple[int, int] | None:
    """(watch id, OS thread id) if a `stopped` body is the handler's, else None."""
    ids = body.get("hitBreakpointIds") or []
    if body.get("reason") == "function breakpoint" and len(ids) == 3 and ids[0] == TRAP_MARK:
        return ids[1], ids[2]
    return None
