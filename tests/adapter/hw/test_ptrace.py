"""hw.ptrace against a real child process: seize, interrupt, registers,
memory, debug registers through PEEKUSER/POKEUSER, single-step, status
decoding, and errors that name the request (ptrace(2))."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import time

import pytest

from adapter.hw import ptrace as pt

pytestmark = pytest.mark.live


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "30"])
    time.sleep(0.02)
    yield proc
    proc.kill()
    proc.wait()


def test_seize_interrupt_regs_memory_detach(sleeper):
    tid = sleeper.pid
    pt.seize(tid)
    assert pt.tracer_of(tid) == os.getpid()
    pt.interrupt(tid)
    st = pt.waitpid(tid)
    assert st.stopped and st.event == pt.EVENT_STOP and not st.gone
    regs = pt.getregs(tid)
    assert regs.rip and regs.rsp and regs.as_dict()["rip"] == regs.rip
    with pt.Memory(tid) as mem:
        word = mem.read_u64(regs.rsp)
        assert pt.peekdata(tid, regs.rsp) == word
        pt.pokedata(tid, regs.rsp - 64, 0x1122334455667788)
        assert mem.read(regs.rsp - 64, 8) == bytes.fromhex("8877665544332211")
        with pytest.raises(OSError):
            mem.read_u64(0)
    # debug registers: DR0 and DR7 round-trip (SDM Vol. 3B 17.2)
    pt.pokeuser(tid, pt.DEBUGREG_OFFSET, regs.rip)
    assert pt.peekuser(tid, pt.DEBUGREG_OFFSET) == regs.rip
    pt.pokeuser(tid, pt.DEBUGREG_OFFSET, 0)
    pt.setregs(tid, regs)
    pt.detach(tid)
    assert pt.tracer_of(tid) == 0


def test_single_step_moves_rip_and_reports_sigtrap():
    # a busy loop: a step taken inside a sleeping system call would wait for it
    proc = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        time.sleep(0.02)
        pt.seize(proc.pid)
        pt.interrupt(proc.pid)
        pt.waitpid(proc.pid)
        pt.singlestep(proc.pid)
        st = pt.waitpid(proc.pid)
        assert st.stop_signal == signal.SIGTRAP and not st.event
        assert pt.getsiginfo(proc.pid).si_signo == signal.SIGTRAP
        pt.detach(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_exit_status_is_decoded():
    proc = subprocess.Popen(["sh", "-c", "sleep 0.2; exit 3"])
    pt.seize(proc.pid, pt.O_TRACEEXIT)
    while True:
        st = pt.waitpid(proc.pid)
        if st.gone:
            break
        if st.event == pt.EVENT_EXIT:
            assert pt.geteventmsg(proc.pid) >> 8 == 3
        pt.cont(proc.pid, 0 if st.event else st.stop_signal)
    assert st.exited and st.exit_code == 3
    assert st.describe() == f"thread {proc.pid} exited with status 3"


def test_errors_name_the_request():
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(pt.PtraceError) as info:
        pt.seize(proc.pid)
    assert info.value.errno == errno.ESRCH and "PTRACE_SEIZE" in str(info.value)
    with pytest.raises(pt.PtraceError) as info:
        pt.getregs(os.getpid())   # not our tracee
    assert info.value.errno == errno.ESRCH and "PTRACE_GETREGS" in str(info.value)


def test_regs_layout_is_user_regs_struct():
    assert pt.ctypes.sizeof(pt.Regs) == 27 * 8
    assert pt.Regs.rip.offset == 16 * 8 and pt.Regs.eflags.offset == 18 * 8
    assert pt.Regs.fs_base.offset == 21 * 8
