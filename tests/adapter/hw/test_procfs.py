"""adapter/hw/procfs.py: the one reader of /proc, on proc(5)'s formats and on this process."""
import os
import threading

from adapter.hw import procfs


def test_stat_splits_after_the_last_parenthesis_of_the_command_name():
    stat = procfs.parse_stat(b"4242 (a (b) c) t 17 4242 4242 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 "
                             b"3 0 987654 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 5 0 0\n")
    assert stat.comm == "a (b) c"
    assert stat.state == "t"
    assert stat.ppid == 17
    assert stat.start_time == "987654"
    assert stat.field(22) == "987654"
    assert stat.processor == 5


def test_status_fields():
    status = procfs.parse_status("Name:\tcat\nTgid:\t12\nTracerPid:\t0\nSigCgt:\t0000000180000002\n")
    assert status.tgid == 12
    assert status.tracer_pid == 0
    assert status.mask("SigCgt") == 0x180000002
    assert status.mask("SigPnd") == 0
    assert status.number("PPid") is None


def test_maps_lines():
    data = (b"55d0c0000000-55d0c0001000 r-xp 00001000 08:01 1234   /usr/bin/my prog\n"
            b"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                  [stack]\n"
            b"7f0000000000-7f0000002000 rw-p 00000000 00:00 0 \n")
    first, stack, anon = procfs.parse_maps(data)
    assert (first.start, first.end, first.perms, first.offset, first.inode, first.path) == (
        0x55D0C0000000, 0x55D0C0001000, "r-xp", 0x1000, 1234, "/usr/bin/my prog")
    assert first.span == "55d0c0000000-55d0c0001000"
    assert stack.path == "[stack]" and anon.path == "" and anon.inode == 0


def test_syscall_lines():
    assert procfs.parse_syscall("running\n").running
    blocked = procfs.parse_syscall("-1 0x7ffd1000 0x401000\n")
    assert blocked.number == -1 and blocked.pc == 0x401000 and not blocked.running
    call = procfs.parse_syscall("0 0x3 0x10 0x2000 0x0 0x0 0x0 0x7ffd1000 0x401000\n")
    assert call.number == 0 and call.arguments == (3, 0x10, 0x2000, 0, 0, 0)


def test_this_process():
    pid = os.getpid()
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    try:
        assert procfs.stat(pid).ppid == os.getppid()
        assert procfs.status(pid).tgid == pid
        assert procfs.status(pid, thread.native_id).tgid == pid
        assert {pid, thread.native_id} <= set(procfs.tasks(pid))
        assert pid in procfs.pids()
        assert any(m.path and os.path.samefile(m.path, "/proc/self/exe")
                   for m in procfs.file_mappings(pid) if m.path.startswith("/"))
    finally:
        done.set()
        thread.join()


def test_a_process_that_is_not_there():
    import pytest
    with pytest.raises(FileNotFoundError):
        procfs.stat(2 ** 22 + 1)
