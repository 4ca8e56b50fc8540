"""Shared by the stepper's live tests: build the fixtures, run the independent
single-step reference, decode a bundle with `ptdebug decode --format ips`.

The reference is deliberately the dumbest possible recorder: PTRACE_SINGLESTEP
of every instruction of the same deterministic run (same trigger, same end),
sharing nothing with the stepper but the ptrace wrapper.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from adapter.capture import blocks, stepper
from adapter.capture.target import Target
from adapter.hw import ptrace as pt

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"
PTDEBUG = [sys.executable, "-m", "adapter.cli"]


def build_c(name: str, out_dir: pathlib.Path) -> pathlib.Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: scripts/bootstrap.sh installs build-essential")
    out = out_dir / pathlib.Path(name).stem
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(PROGRAMS / name)], check=True)
    return out


def build_go(name: str, out_dir: pathlib.Path) -> pathlib.Path:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                                else None)
    if go is None:
        pytest.fail("the Go toolchain is missing (a documented requirement)")
    module = out_dir / "gomod"
    module.mkdir(exist_ok=True)
    shutil.copy(PROGRAMS / name, module / name)
    (module / "go.mod").write_text("module fixture\n\ngo 1.21\n")
    out = out_dir / (pathlib.Path(name).stem + "_go")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    subprocess.run([go, "build", "-o", str(out), "."], cwd=module, check=True, env=env)
    return out


def reference_launched(argv, symbol, env=None) -> list[int]:
    """Single-step `argv` (ASLR off) from the first call of `symbol` to its return."""
    target = Target.launch([str(a) for a in argv], env=env, no_aslr=True)
    try:
        tid = target.run_to(target.resolve(symbol))
        target.keep_only(tid)
        return reference_from_trigger(tid)
    finally:
        target.release()
        if target.launched is not None:
            target.launched.wait(30)


def reference_from_trigger(tid: int) -> list[int]:
    """Single-step the stopped thread from a function's entry to its return."""
    regs = pt.getregs(tid)
    with pt.Memory(tid) as mem:
        ret = mem.read_u64(regs.rsp)
        code = blocks.CodeCache(mem.read)
        ips, why = stepper.single_step_path(tid, until=ret, until_rsp=regs.rsp + 8,
                                            collapse_rep=lambda ip: code.insn(ip).rep)
    assert why == "reached the end address", why
    return list(ips)


def decode_ips(bundle) -> tuple[list[int], list[str]]:
    """`ptdebug decode BUNDLE --format ips`: (instruction addresses, event/error lines)."""
    out = subprocess.run([*PTDEBUG, "decode", str(bundle), "--format", "ips"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ips, events = [], []
    for line in out.stdout.splitlines():
        if line.startswith("["):
            events.append(line)
        elif line.strip():
            ips.append(int(line, 16))
    return ips, events


def errors_in(events: list[str]) -> list[str]:
    return [e for e in events if "error" in e.lower()]


def libipt_decode_ips(bundle) -> tuple[list[int], list[dict]]:
    """The bundle decoded by the reference decoder (libipt 2.0.5 through the
    project's oracle binding): (instruction addresses, error records)."""
    from oracle import libipt
    records = libipt_decode_records(bundle)
    return libipt.ips(records), [r for r in records if r["type"] == "error"]


def libipt_decode_records(bundle) -> list[dict]:
    """libipt's instruction, event and error records of the bundle's first stream,
    each instruction with libipt's time (`tsc`) under the manifest's timing."""
    from oracle import libipt

    from adapter.capture.bundle import Bundle
    if not libipt.available():
        pytest.fail("libipt is missing: scripts/bootstrap.sh installs libipt-dev")
    b = Bundle.open(bundle)
    sections = []
    for im in b.images:
        path = b.image_path(im)
        source = path.read_bytes() if im["kind"] == "snapshot" else str(path)
        sections.append(libipt.Section(source, im["load_address"], im["offset"], im["size"]))
    timing = b.manifest["timing"]
    records = libipt.libipt_insns(b.stream_bytes(b.streams[0]), sections,
                                  mtc_freq=timing["mtc_freq"], nom_freq=timing["nom_freq"],
                                  cpuid_0x15=(timing["cpuid_0x15_eax"],
                                              timing["cpuid_0x15_ebx"]))
    return records
