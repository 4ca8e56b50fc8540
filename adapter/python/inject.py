"""Running Python source inside a running CPython process, attached by pid, without gdb: what
debugpy's attach by pid needs, done with ptdebug's own ptrace call (adapter.hw.remote_call).

Layer: adapter.python (knows CPython's C API; the mechanism is adapter.hw's).

On one thread of the process that waits in a system call with no lock held (the main thread
first: it is the one that has a Python thread state in every program, and a service's main
thread mostly waits in poll or accept), ptdebug calls, as a C extension would:

    state = PyGILState_Ensure();  PyRun_SimpleStringFlags(source, NULL);  PyGILState_Release(state);

PyGILState_Ensure waits for the GIL as any thread does (the other threads run on meanwhile, so
whoever holds it lets it go). The source runs as that thread's code, with its thread state.
What it raises is written to a file of ptdebug's and reported, never printed into the
program's stderr. When the source returns the thread's registers are put back and its system
call restarts. debugpy's way (gdb `call`) stops every thread and needed gdb to write back an
XSAVE area it does not know on some kernels (adapter/hw/gdb_inject.py), which killed the
process.
"""
from __future__ import annotations

import errno
import os
import tempfile
import threading
import time

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from adapter.hw import ptrace as pt
from adapter.hw.mappings import load_bias
from adapter.hw.procfs import file_mappings
from adapter.hw.remote_call import HeldThread, RemoteCallError, ThreadBusy, waiting_syscall

API = ("PyGILState_Ensure", "PyRun_SimpleStringFlags", "PyGILState_Release")
"""The C API functions called, exported by every CPython 3 (the executable's .dynsym where
libpython is linked in, else libpython3.X.so's)."""
AT_REST_WAIT = 3.0
"""How long ptdebug waits for a thread of the process to be waiting in a system call where
code may run (a busy service has such moments between requests)."""
RUN_TIMEOUT = 30.0
"""How long the injected source may run (importing debugpy on a loaded machine: ~1 s)."""


class InjectError(Exception):
    """The source could not be run in the process; the message says why for the user. The
    process was left as it was unless the message says otherwise."""


def python_api(pid: int) -> dict[str, int]:
    """Addresses of API's functions in process `pid`. Raises InjectError when the process is
    not a CPython program."""
    try:
        mapped = {m.path for m in file_mappings(pid) if m.path.startswith("/")}
    except OSError as exc:
        raise InjectError(f"cannot read the mappings of process {pid}: {exc}") from None
    exe = os.path.realpath(f"/proc/{pid}/exe")
    candidates = [exe] + sorted(p for p in mapped if "libpython" in os.path.basename(p))
    for path in candidates:
        found = _dynamic_symbols(path, API)
        if len(found) == len(API):
            try:
                bias = load_bias(pid, path)
            except OSError:
                continue
            return {name: bias + value for name, value in found.items()}
    raise InjectError(f"process {pid} is not a CPython program: none of {', '.join(candidates)}"
                      f" exports {API[0]}")


def _dynamic_symbols(path: str, names: tuple[str, ...]) -> dict[str, int]:
    """Link-time addresses of the defined function symbols `names` in `path`'s .dynsym. An
    IFUNC (glibc's strlen...) is left out: calling it runs its resolver, which returns the
    address of the function rather than calling it."""
    try:
        with open(path, "rb") as f:
            table = ELFFile(f).get_section_by_name(".dynsym")
            if not isinstance(table, SymbolTableSection):
                return {}
            found = {}
            for name in names:
                symbols = table.get_symbol_by_name(name) or []
                for symbol in symbols:
                    if symbol["st_shndx"] != "SHN_UNDEF" and symbol["st_value"] and \
                            symbol["st_info"]["type"] == "STT_FUNC":
                        found[name] = symbol["st_value"]
                        break
            return found
    except (OSError, ELFError):
        return {}


def _candidate_threads(pid: int) -> list[int]:
    """The process's threads, the main one first."""
    try:
        others = [tid for tid in pt.threads_of(pid) if tid != pid]
    except OSError:
        raise InjectError(f"no process {pid} (it is not running)") from None
    return [pid, *others]


def run_python(pid: int, source: str, *, wait: float = AT_REST_WAIT,
               timeout: float = RUN_TIMEOUT, log=lambda message: None) -> str:
    """Run `source` in CPython process `pid` on one of its threads; returns a sentence saying
    which thread ran it. Raises InjectError saying why it did not run, or that it raised."""
    tracer = pt.tracer_of(pid) if os.path.exists(f"/proc/{pid}") else None
    if tracer is None:
        raise InjectError(f"no process {pid} (it is not running)")
    if tracer:
        raise InjectError(f"process {pid} is traced by process {tracer} (another debugger): "
                          "only one tracer may hold it")
    api = python_api(pid)
    report_path = report_file()
    wrapped = _wrapped(source, report_path)
    outcome: dict = {}
    done = threading.Event()

    def inject() -> None:
        try:
            outcome["ran_on"] = _run_on_a_resting_thread(pid, api, wrapped, wait, log)
        except BaseException as exc:  # reported to the waiting caller
            outcome["error"] = exc
        finally:
            done.set()

    # its own thread: ptrace answers only the thread that attached, and a source that runs
    # past `timeout` must still be waited for and the thread given back when it returns
    threading.Thread(target=inject, name=f"ptdebug-inject-{pid}", daemon=True).start()
    try:
        if not done.wait(wait + timeout):
            raise InjectError(
                f"the code ptdebug runs in process {pid} to attach has not returned after "
                f"{timeout:g} s; its thread is given back when it does")
        error = outcome.get("error")
        if isinstance(error, InjectError):
            raise error
        if error is not None:
            raise InjectError(f"cannot run code in process {pid}: {error}") from error
        raised = read_report(report_path)
        if raised:
            raise InjectError(f"the attach code raised in process {pid}: "
                              f"{raised.splitlines()[-1]}\n{raised}")
        return outcome["ran_on"]
    finally:
        if done.is_set():
            os.unlink(report_path)


def report_file() -> str:
    """A new empty file for code run in the process to write what it raised into (the
    process may run as another user, hence writable by all; it holds a traceback at most)."""
    fd, path = tempfile.mkstemp(prefix="ptdebug-inject-", suffix=".txt")
    os.close(fd)
    os.chmod(path, 0o666)
    return path


def read_report(path: str) -> str:
    """What the code wrote into a report_file (a traceback), or "" (nothing raised)."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _wrapped(source: str, report_path: str) -> bytes:
    """`source` run so that what it raises goes to `report_path`, not to the program's stderr,
    and it leaves no name behind in __main__; NUL-terminated for the C API."""
    text = ("def _ptdebug_run(source, report):\n"
            "    try:\n"
            "        exec(compile(source, '<ptdebug attach>', 'exec'), {'__name__': '__ptdebug__'})\n"
            "    except BaseException:\n"
            "        import traceback\n"
            "        with open(report, 'w') as f:\n"
            "            f.write(traceback.format_exc())\n"
            f"_ptdebug_run({source!r}, {report_path!r})\n"
            "del _ptdebug_run\n")
    return text.encode() + b"\0"


def _run_on_a_resting_thread(pid: int, api: dict[str, int], source: bytes, wait: float,
                             log) -> str:
    deadline = time.monotonic() + wait
    while True:
        for tid in _candidate_threads(pid):
            if waiting_syscall(pid, tid) is None:
                continue
            try:
                held = HeldThread(pid, tid)
            except ThreadBusy:
                continue                              # woke between the look and the stop
            except pt.PtraceError as exc:
                if exc.errno == errno.EPERM and not pt.tracer_of(tid):
                    # not another tracer's thread: no later try would be allowed either
                    raise InjectError(
                        f"ptdebug may not trace process {pid} ({exc.strerror}): run ptdebug "
                        "as the process's user with /proc/sys/kernel/yama/ptrace_scope 0, or "
                        "as root") from None
                log(f"thread {tid} of process {pid} cannot be held: {exc}")
                continue
            except RemoteCallError as exc:
                log(f"thread {tid} of process {pid} cannot be held: {exc}")
                continue
            with held:
                address = held.push(source)
                # no try/finally: a call that faults leaves nothing safe to call after it
                state = held.call(api["PyGILState_Ensure"])
                held.call(api["PyRun_SimpleStringFlags"], address, 0)
                held.call(api["PyGILState_Release"], state & 0xFFFFFFFF)
                return f"thread {tid}, waiting in {held.syscall}"
        if time.monotonic() > deadline:
            raise InjectError(
                f"no thread of process {pid} was waiting in a system call where ptdebug can "
                f"run code safely (poll, accept, recv, sleep...) within {wait:g} s: every "
                "thread was busy or waiting on a lock. Attach again when the process is idle, "
                "or start it under debugpy and attach with \"connect\"")
        time.sleep(0.002)
