"""signals_held: SIGINT/SIGTERM sent to the process wait until the block ends, whichever
thread the kernel hands them to, and then do what they would have done.

Each case runs in a fresh interpreter, so that real signals reach a process whose threads and
handlers are known (pytest's own are not)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CASE = textwrap.dedent('''\
    import os, signal, sys, threading, time
    from adapter.hw.signals import signals_held
    bystander = threading.Event()
    threading.Thread(target=bystander.wait, daemon=True).start()  # takes a process signal
    {setup}
    try:
        with signals_held():
            os.kill(os.getpid(), signal.{signal})
            time.sleep(0.1)  # the bystander runs the C handler; the main thread checks here
            print("block finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted after the block", flush=True)
    print("after", flush=True)
''')


def _run(signal_name: str, setup: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CASE.format(signal=signal_name, setup=setup)],
                          capture_output=True, text=True, timeout=30)


def test_sigint_to_the_process_interrupts_after_the_block():
    done = _run("SIGINT")
    assert done.stdout.split("\n")[:3] == ["block finished", "interrupted after the block",
                                           "after"], done


def test_sigterm_with_its_default_action_ends_the_process_after_the_block():
    done = _run("SIGTERM")
    assert done.returncode == -15 and done.stdout == "block finished\n", done


def test_a_python_handler_runs_once_after_the_block():
    done = _run("SIGTERM", setup=(
        "signal.signal(signal.SIGTERM, lambda *_: print('handled', flush=True))"))
    assert done.returncode == 0 and done.stdout == "block finished\nhandled\nafter\n", done


NESTED = textwrap.dedent('''\
    import signal, threading, time
    from adapter.hw.signals import signals_held
    def send_and_wait():
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        time.sleep(0.05)
    try:
        with signals_held():
            if {nested}:
                with signals_held():
                    send_and_wait()
            else:
                send_and_wait()
            print("block finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted after the block", flush=True)
''')


@pytest.mark.parametrize("nested", [False, True])
def test_a_signal_sent_to_the_thread_itself_waits_too(nested):
    done = subprocess.run([sys.executable, "-c", NESTED.format(nested=nested)],
                          capture_output=True, text=True, timeout=30)
    assert done.stdout == "block finished\ninterrupted after the block\n", done


ALARM = textwrap.dedent('''\
    import signal, time
    from adapter.hw.signals import alarm_ticks
    fired, ticks = [], []
    signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, {outer})
    with alarm_ticks(0.02, lambda *_: ticks.append(1)):
        time.sleep({inside})
    time.sleep(0.6)
    print(len(ticks) > 3, len(fired), round(fired[0] - start, 1) if fired else None)
''')


@pytest.mark.parametrize("outer, inside, fires_at", [(0.5, 0.2, 0.5), (0.1, 0.3, 0.3)])
def test_alarm_ticks_give_back_the_alarm_they_borrowed(outer, inside, fires_at):
    """The alarm set before (pytest-timeout's own, in a recording test) still fires: when it
    was due, or as the block ends if it came due inside it."""
    done = subprocess.run([sys.executable, "-c", ALARM.format(outer=outer, inside=inside)],
                          capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["True", "1", str(fires_at)], done
