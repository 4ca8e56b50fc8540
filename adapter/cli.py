"""The `ptdebug` console script: one table of subcommands, each a module.

Layer: top-level entry point. Each subcommand lives in the module that owns
the feature and exposes `main(argv: list[str]) -> int`; this file only
dispatches, so adding a command never touches another feature's code.
Modules are imported lazily: `ptdebug dump` must not pay for debugpy.
"""
from __future__ import annotations

import importlib
import sys

# name -> (module, one-line help). Order is the order of `ptdebug --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "dump": ("pt_decoder.tools.dump", "print the PT packets of a trace, one a line (ptdump format)"),
    "decode": ("pt_decoder.tools.decode", "print the instruction flow of a trace (ptxed format, ips, jsonl)"),
    "record": ("adapter.capture.cli", "record a trace bundle of a command or process"),
    "import": ("adapter.capture.import_cli", "import a perf.data file into a trace bundle"),
    "watch": ("adapter.watch_cli", "hardware watchpoint on a process's memory"),
    "doctor": ("adapter.hw.doctor", "what this machine can record and watch, and why not"),
    "dap": ("adapter.dap_main", "run the Debug Adapter Protocol server (stdio or --port)"),
    "demo": ("adapter.demo", "a guided session on a built-in inference-service example"),
    "bench": ("benchmarks.run_all", "run the benchmarks side by side with their references"),
    "lsp": ("adapter.lsp.server", "hot-path language server over the latest capture"),
    "export": ("adapter.export_cli", "export a bundle to pprof or Perfetto"),
    "latency": ("adapter.latency_cli", "latency percentiles between two code points of a bundle"),
}


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: ptdebug COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines.append("")
    lines.append("`ptdebug COMMAND --help` for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    entry = COMMANDS.get(name)
    if entry is None:
        print(f"ptdebug: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name = entry[0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"ptdebug: the {name!r} command is not available in this build "
                  f"({module_name} is missing)", file=sys.stderr)
            return 2
        raise
    try:
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ptdebug dump big.pt | head` is normal use, not an error.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
