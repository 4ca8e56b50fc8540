"""`ptdebug record`: record a command or a running process into a trace bundle.

Layer: adapter.commands (command line over adapter.capture). Parses and checks the arguments once,
picks the recorder once (adapter/capture/recorders.py: `auto` is Intel PT where `ptdebug
doctor` says it works, else DBI where Frida can follow the target, else the ptrace
stepper; the reason is printed and in --json), calls it and prints where the bundle is and
whether it is complete, and how a program it launched ended. Exit status:
0 complete, 1 partial or failed (the bundle kept says why) or a launched
program that was killed by a signal, 2 bad arguments. SIGINT and SIGTERM
end the recording (partial) and let the program run on; ptdebug then waits
for a program it launched, and a second signal leaves without waiting.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys

from adapter.capture import stepper as stepper_mod

USAGE = ("ptdebug record [--recorder auto|intel_pt|dbi|stepper] [--pid PID | --tid TID] "
         "[--from SYMBOL|ADDR] [--until-return | --count N | --until SYMBOL|ADDR | "
         "--duration MS] -o BUNDLE [--force] [--json] [-- CMD ARGS...]")


STEPPER_MAX_INSTRUCTIONS = 10_000_000
"""--max-instructions' default for the stepper (10^4-10^5 instructions a second)."""
DBI_MAX_INSTRUCTIONS = 1_000_000_000
"""... and for DBI (10^8 a second): its window's memory is bounded anyway (dbi.MAX_LAG)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ptdebug record", usage=USAGE,
                                description="Record the instruction flow of a command or a "
                                            "running process into a trace bundle.")
    p.add_argument("--recorder", "--backend", dest="recorder", default="auto",
                   choices=("auto", "intel_pt", "dbi", "stepper"),
                   help="what records: Intel PT, dynamic instrumentation (Frida Stalker) or "
                        "the ptrace stepper; auto takes the fastest this machine and target "
                        "allow (--backend is the older name)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--pid", type=int, help="attach to this running process")
    who.add_argument("--tid", type=int, help="attach to this one thread")
    p.add_argument("--from", dest="start", metavar="SYMBOL|ADDR",
                   help="start when a thread reaches this function or address "
                        "(default: at once)")
    end = p.add_mutually_exclusive_group()
    end.add_argument("--until-return", action="store_true",
                     help="stop when the --from function returns")
    end.add_argument("--count", type=int, metavar="N", help="stop after N instructions")
    end.add_argument("--until", metavar="SYMBOL|ADDR", help="stop before this address runs")
    p.add_argument("--duration", type=float, metavar="MS",
                   help="stop after MS milliseconds (also a limit on the other conditions)")
    p.add_argument("-o", "--output", required=True, metavar="BUNDLE",
                   help="the bundle directory to write")
    p.add_argument("--force", action="store_true",
                   help="replace BUNDLE if it exists (without it, an existing BUNDLE is an error)")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON object on stdout")
    p.add_argument("--no-copy-images", action="store_true",
                   help="reference the program's files by path instead of copying them")
    p.add_argument("--no-aslr", action="store_true",
                   help="launch the command with address randomisation off (repeatable runs)")
    p.add_argument("--breakpoints", choices=("auto", "int3", "dr"), default="auto",
                   help="stepper: how it stops the thread: int3 (planted bytes, fastest; "
                        "for a launched single-threaded program), dr (debug registers; any "
                        "target, nothing patched); auto picks")
    p.add_argument("--exact-returns", action="store_true",
                   help="stepper: stop at every return instead of following proven ones")
    p.add_argument("--max-instructions", type=int, default=None,
                   help="never record more than this (default: 10,000,000 with the stepper, "
                        "10^9 with dbi)")
    p.add_argument("--trigger-timeout", type=float, metavar="S",
                   help="give up if no thread reaches --from within S seconds")
    p.add_argument("--snapshot", action="store_true",
                   help="intel_pt: snapshot (overwrite) mode, written when the recording ends")
    p.add_argument("--filter", action="append", default=[], metavar="FILTER",
                   help="intel_pt: address filter, perf syntax (e.g. 'filter main @ /bin/prog')")
    p.add_argument("--python", choices=("auto", "on", "off"), default="auto",
                   help="stepper: write the running Python frame (code object, line) into the "
                        "trace when the target runs CPython 3.10-3.13 (auto), require it (on), "
                        "or not (off)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    args.command = command
    if not command and args.pid is None and args.tid is None:
        parser.error("give a command after --, or --pid PID, or --tid TID")
    if command and (args.pid is not None or args.tid is not None):
        parser.error("give either a command or --pid/--tid, not both")
    if os.path.lexists(args.output) and not args.force:
        parser.error(f"{args.output} exists; give --force to replace it")
    for what, number in (("process", args.pid), ("thread", args.tid)):
        if number is not None and (number <= 0 or not os.path.exists(f"/proc/{number}")):
            parser.error(f"no {what} {number} (it is not running)")
    if command and os.sep not in command[0] and shutil.which(command[0]) is None:
        parser.error(f"{command[0]}: no such program on PATH")
    if command and os.sep in command[0] and not os.access(command[0], os.X_OK):
        parser.error(f"{command[0]}: " + ("not executable" if os.path.exists(command[0])
                                         else "no such file"))
    if args.until_return and not args.start:
        parser.error("--until-return needs --from FUNCTION")
    if args.count is not None and args.count <= 0:
        parser.error("--count must be a positive number of instructions")
    if args.duration is not None and args.duration <= 0:
        parser.error("--duration must be a positive number of milliseconds")
    if args.max_instructions is not None and args.max_instructions <= 0:
        parser.error("--max-instructions must be a positive number of instructions")
    if not (args.until_return or args.count or args.until or args.duration):
        args.count = 100_000  # a bounded default: the stepper is slow on purpose-free runs
    return args


def choose_recorder(args) -> tuple[str, str]:
    """The recorder (recorders.choose) and why; exits 2 when nothing can record here."""
    from adapter.capture import recorders
    from adapter.commands import doctor
    if args.recorder == "auto":
        report = doctor.check(probe_dbi=False)
        if report["recorder"]["backend"] is None and not report["ptrace"]["usable"]:
            raise SystemExit(f"ptdebug record: no recorder can record here: "
                             f"{report['recorder']['why']} (see `ptdebug doctor`)")
        ipt = report["intel_pt"]
        choice = recorders.choose(
            "auto", pid=args.pid if args.pid is not None else (
                _pid_of_tid(args.tid) if args.tid is not None else None),
            program=shutil.which(args.command[0]) if args.command else None,
            intel_pt_usable=bool(ipt["available"] and ipt.get("usable")))
        return choice.name, choice.why
    return args.recorder, f"--recorder {args.recorder}"


def _pid_of_tid(tid: int) -> int | None:
    from adapter.capture.target import TargetError, tgid_of
    try:
        return tgid_of(tid)
    except TargetError:
        return None


def describe_exit(code: int) -> str:
    """An exit code as _Child.wait gives it (-N: killed by signal N), in words."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (signal {-code})"
    return f"exited with status {code}"


def _stop_on_sigterm() -> None:
    """SIGTERM ends the recording as Ctrl-C does (record_stepper lets the target go)."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")
    signal.signal(signal.SIGTERM, handler)


def _wait_for_program(program, log) -> int | None:
    """Wait for a launched program that was let go after a failed recording;
    a second SIGINT/SIGTERM leaves it running."""
    log(f"waiting for the program (pid {program.pid}) to end; signal again to leave it running")
    try:
        return program.wait()
    except KeyboardInterrupt:
        log(f"left the program (pid {program.pid}) running, untraced")
        return None


def _report_program(code: int | None, log) -> bool:
    """Say how a launched program ended; True when it died of a signal."""
    if code is None:
        return False
    log(f"the program {describe_exit(code)}")
    return code < 0


def summary(manifest: dict, bundle, backend: str, program_exit: int | None = None,
            why: str | None = None) -> dict:
    """`record --json`: what was recorded, where, by which recorder and why, and whether it
    is complete (`backend` is the recorder's older name, kept for scripts)."""
    stats = manifest.get("stats") or {}
    return {"status": manifest.get("status"), "bundle": os.path.abspath(bundle),
            "recorder": {"name": backend, "why": why}, "backend": backend,
            "threads": [t.get("tid") for t in manifest.get("threads", [])],
            "instructions": stats.get("instructions"), "end_reason": stats.get("end_reason"),
            "partial_reason": manifest.get("partial_reason"), "program_exit": program_exit,
            "python": _python_summary(manifest)}


def _python_summary(manifest: dict) -> dict | None:
    """What the Python attribution recorded (docs/python.md), or None without it."""
    table = manifest.get("python")
    if not isinstance(table, dict):
        return None
    return {"version": table.get("version"), "samples": table.get("samples"),
            "code_objects": len(table.get("codes") or {})}


def main(argv: list[str]) -> int:
    args = parse(argv)
    backend, why = choose_recorder(args)
    log = (lambda msg: print(f"ptdebug record: {msg}", file=sys.stderr))
    log(f"recorder {backend} ({why})")
    if backend == "intel_pt":
        from adapter.capture import intel_pt
        try:
            result = intel_pt.record_cli(args, log)
        except intel_pt.IntelPtError as exc:
            print(f"ptdebug record: {exc}", file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(summary(result, args.output, backend, why=why)))
        return 0 if result["status"] == "complete" else 1
    from adapter.capture import record
    _stop_on_sigterm()
    if backend == "dbi":
        outcome = _record_dbi(args, log)
        if outcome is not None:
            return _report(args, *outcome, backend="dbi", why=why, log=log)
        backend, why = "stepper", "DBI cannot record this (said above); the ptrace stepper records"
        log(f"recorder {backend} ({why})")
    end = stepper_mod.EndCondition(count=args.count, until_return=args.until_return,
                                   duration_ms=args.duration)
    if args.until:
        try:
            end.until = int(args.until, 0)
        except ValueError:
            end.until_spec = args.until
    try:
        result = record.record_stepper(
            args.output, command=args.command or None, pid=args.pid, tid=args.tid,
            start=args.start, end=end, predict_returns=not args.exact_returns,
            copy_images=not args.no_copy_images, no_aslr=args.no_aslr,
            trigger_timeout=args.trigger_timeout, log=log, breakpoints=args.breakpoints,
            max_instructions=args.max_instructions or STEPPER_MAX_INSTRUCTIONS,
            wait_for_exit=True, python=args.python)
    except record.RecordFailed as exc:
        return _failed(exc, log)
    return _report(args, result, backend=backend, why=why, log=log)


def _failed(exc, log) -> int:
    log(str(exc))
    if exc.bundle:
        log(f"partial bundle kept at {exc.bundle}")
    if exc.killed_program is not None:
        log(f"ended the program (pid {exc.killed_program}): its recording never began")
    elif exc.program is not None:
        _report_program(_wait_for_program(exc.program, log), log)
    return 1


def _record_dbi(args, log):
    """Record with DBI: (result,) when it recorded, None when DBI cannot record this target
    or these options (the caller falls back to the stepper). A failed recording exits."""
    from adapter.capture import dbi, record, record_dbi
    for option, given in (("--until", args.until), ("--python on", args.python == "on")):
        if not given:
            continue
        if args.recorder == "dbi":
            raise SystemExit(f"ptdebug record: {option} is not supported by the dbi recorder "
                             "(use --recorder stepper)")
        log(f"{option} needs the ptrace stepper")
        return None
    end = stepper_mod.EndCondition(count=args.count, until_return=args.until_return,
                                   duration_ms=args.duration)
    try:
        return (record_dbi.record_dbi(
            args.output, command=args.command or None, pid=args.pid, tid=args.tid,
            start=args.start, end=end, copy_images=not args.no_copy_images,
            max_instructions=args.max_instructions or DBI_MAX_INSTRUCTIONS, log=log,
            trigger_timeout=args.trigger_timeout),)
    except dbi.DbiUnavailable as exc:
        log(f"DBI cannot record this target: {exc}")
        if args.recorder == "dbi":
            raise SystemExit(1) from None
        return None
    except record.RecordFailed as exc:
        raise SystemExit(_failed(exc, log)) from None


def _report(args, result, *, backend: str, why: str, log) -> int:
    m = result.manifest
    stats = m.get("stats", {})
    if args.json:
        print(json.dumps(summary(m, result.bundle, backend, result.target_exit, why=why)))
    else:
        print(f"{m['status']}: {stats.get('instructions', 0)} instructions of thread "
              f"{m['threads'][0]['tid'] if m['threads'] else '?'} in {result.bundle} "
              f"({stats.get('end_reason', '')})")
    python = _python_summary(m)
    if python is not None and not args.json:
        log(f"Python attribution: CPython {python['version']}, {python['samples']} frame "
            f"samples, {python['code_objects']} code objects")
    killed = _report_program(result.target_exit, log)
    if m["status"] != "complete":
        log(f"partial: {m['partial_reason']}")
        return 1
    return 1 if killed else 0
