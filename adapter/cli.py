"""The `ptdebug` console script: one table of subcommands, each a module.

Layer: top-level entry point. Each subcommand lives in the module that owns
the feature and exposes `main(argv: list[str]) -> int`; this file only
dispatches, so adding a command never touches another feature's code.
Modules are imported lazily: `ptdebug dump` must not pay for debugpy.

One convention for every command (what git, pip and argparse users expect):
exit status 0 when the work is done, 1 when the work failed (a recording
that ended partial, a build that failed, a decode that could not finish),
2 for bad usage or bad input (an unknown option, a missing or unreadable
file, a PID that names no process, a bundle that is not one). Every
failure says, in one line on stderr starting with `ptdebug COMMAND:`, what
was wrong; no raw `[Errno N]`. An error a command lets through is turned
into that line here, at the one boundary (`_failure`). Commands that write
an output refuse to replace an existing one without `--force`, and every
command that produces a result has `--json`.
"""
from __future__ import annotations

import importlib
import os
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

# name -> (module or module:function, one-line help). Order is the order of `ptdebug --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "dump": ("pt_decoder.tools.dump", "print the PT packets of a trace, one a line (ptdump format)"),
    "decode": ("pt_decoder.tools.decode", "print the instruction flow of a trace (ptxed format, ips, jsonl)"),
    "record": ("adapter.commands.record", "record a trace bundle of a command or process"),
    "import": ("adapter.commands.import_perf", "import a perf.data file into a trace bundle"),
    "watch": ("adapter.commands.watch", "hardware watchpoint on a process's memory"),
    "doctor": ("adapter.commands.doctor", "what this machine can record and watch, and why not"),
    "dap": ("adapter.commands.dap", "run the Debug Adapter Protocol server (stdio or --port)"),
    "demo": ("adapter.demo", "a guided session on a built-in inference-service example"),
    "bench": ("adapter.cli:bench", "run the benchmarks side by side with their references "
                                   "(from a source checkout)"),
    "lsp": ("adapter.lsp.server", "hot-path language server over the latest capture"),
    "export": ("adapter.commands.export", "export a bundle to pprof or Perfetto"),
    "latency": ("adapter.commands.latency", "latency percentiles between two code points of a bundle"),
    "captures": ("adapter.commands.captures", "list, pin, remove and pack the kept captures; "
                                              "their size limit"),
}

# Exceptions that mean the input was bad (exit 2) when a command lets one through:
# (module, class). Checked only when the module is already imported (else none was raised).
INPUT_ERRORS = (
    ("adapter.capture.bundle", "BundleError"),
    ("adapter.recording.recording", "TraceError"),
    ("pt_decoder.errors", "PtError"),
)


def version_text() -> str:
    """`ptdebug --version`: the release, where this copy is, and the interpreter (as pip says)."""
    from adapter import __version__
    where = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    python = ".".join(str(n) for n in sys.version_info[:3])
    return f"ptdebug {__version__} from {where} (Python {python})"


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: ptdebug [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines.append("")
    lines.append("`ptdebug COMMAND --help` for a command's options. Exit status: 0 done, "
                 "1 the work failed, 2 bad usage or input.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return EXIT_OK
    if argv[0] in ("-V", "--version"):
        print(version_text())
        return EXIT_OK
    name, rest = argv[0], argv[1:]
    entry = COMMANDS.get(name)
    if entry is None:
        print(f"ptdebug: unknown command {name!r} (`ptdebug --help` lists them)", file=sys.stderr)
        return EXIT_USAGE
    module_name, _, function = entry[0].partition(":")
    module = importlib.import_module(module_name)
    try:
        return int(getattr(module, function or "main")(rest) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ptdebug dump big.pt | head` is normal use, not an error.
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the one boundary: known kinds become one line
        failure = _failure(exc)
        if failure is None:
            raise  # a bug: its traceback is what a report needs
        status, text = failure
        print(f"ptdebug {name}: {text}", file=sys.stderr)
        return status


def _failure(exc: Exception) -> tuple[int, str] | None:
    """(exit status, one-line message) for an error a command let through, or None for a bug."""
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        text = f"{exc.filename}: {reason}" if exc.filename else reason
        if exc.filename2:
            text = f"{exc.filename} -> {exc.filename2}: {reason}"
        # a path that does not exist or is the wrong kind of file was given by the user
        bad_path = isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError))
        return (EXIT_USAGE if bad_path else EXIT_FAILED), text
    for module_name, class_name in INPUT_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(exc, getattr(module, class_name)):
            return EXIT_USAGE, " ".join(str(exc).split()) or class_name
    return None


def source_checkout() -> str | None:
    """The source checkout this copy of ptdebug runs from (the directory holding `adapter/`,
    `benchmarks/` and `tests/fixtures/`), or None for an installed copy."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    needed = (os.path.join(root, "benchmarks", "run_all.py"),
              os.path.join(root, "tests", "fixtures", "programs"))
    return root if all(os.path.exists(p) for p in needed) else None


def bench(argv: list[str]) -> int:
    """`ptdebug bench`: benchmarks/run_all.py of the source checkout. The benchmarks and their
    inputs (test fixtures, the libipt reference, ../shared traces) are not installed with the
    wheel; an installed ptdebug says where they come from instead."""
    root = source_checkout()
    if root is None:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        print("ptdebug bench: the benchmarks and their inputs (benchmarks/, tests/fixtures/) "
              f"come with a source checkout, and this ptdebug is installed ({here} has none); "
              "run `ptdebug bench` in a clone of the repository (after scripts/bootstrap.sh)",
              file=sys.stderr)
        return EXIT_FAILED
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks import run_all
    return run_all.main(argv)


if __name__ == "__main__":
    sys.exit(main())
