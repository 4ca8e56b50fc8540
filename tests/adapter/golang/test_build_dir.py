"""adapter/golang/build_dir.py: a launch's build folder is marked with its adapter, and the
folders of adapters that died (real processes, killed with SIGKILL) are swept at the next
launch while those of living adapters, links and unmarked folders are left alone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from adapter.golang.build_dir import OWNER_FILE, PREFIX, make_build_dir, sweep_orphans


def _folder_made_by_a_process_then_killed(parent) -> str:
    """Another process (an adapter stand-in) makes a build folder, prints it, and is killed
    with SIGKILL: nothing of its own clean-up runs."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.getcwd()!r})
        from adapter.golang.build_dir import make_build_dir
        print(make_build_dir({str(parent)!r}), flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    folder = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    return folder


def test_a_killed_adapters_folder_is_swept_and_a_living_ones_kept(tmp_path):
    dead = _folder_made_by_a_process_then_killed(tmp_path)
    (tmp_path / os.path.basename(dead) / "__debug_bin").write_bytes(b"\x7fELF")
    mine = make_build_dir(str(tmp_path))
    assert os.path.basename(mine).startswith(PREFIX)
    assert not os.path.exists(dead), "the dead adapter's folder is left behind"
    assert os.path.isdir(mine)
    assert sweep_orphans(str(tmp_path)) == []
    assert os.path.isdir(mine), "a living adapter's folder was removed"


def test_unmarked_folders_and_links_are_never_removed(tmp_path):
    unmarked = tmp_path / (PREFIX + "handmade")
    unmarked.mkdir()
    (unmarked / "keep").write_text("x")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / OWNER_FILE).write_text("1 0\n")  # names a process that is not pid 1's start
    (tmp_path / (PREFIX + "link")).symlink_to(target)
    # a marked folder whose owner file is a FIFO is not read (it would block) and is kept
    fifo_folder = tmp_path / (PREFIX + "fifo")
    fifo_folder.mkdir()
    os.mkfifo(fifo_folder / OWNER_FILE)
    assert sweep_orphans(str(tmp_path)) == []
    assert (unmarked / "keep").exists() and (target / OWNER_FILE).exists()
    assert fifo_folder.exists()


def test_a_reused_pid_does_not_keep_a_folder(tmp_path):
    """The owner file names this very process but another start time (the pid was reused):
    the folder's adapter is gone."""
    folder = tmp_path / (PREFIX + "reused")
    folder.mkdir()
    (folder / OWNER_FILE).write_text(f"{os.getpid()} 1\n")
    assert sweep_orphans(str(tmp_path)) == [str(folder)]
