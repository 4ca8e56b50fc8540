"""`ptdebug captures`: what a captures directory holds, and keeping it within its limit.

    ptdebug captures [list] [--dir DIR] [--json]        captures, sizes, pins, leases, totals
    ptdebug captures pin|unpin CAPTURE... [--dir DIR]   keep one whatever the limit, or not
    ptdebug captures rm CAPTURE... [--force] [--dir DIR]  remove (pinned: --force; in use: never)
    ptdebug captures limit [SIZE] [--dir DIR]           show or set the directory's limit
    ptdebug captures gc [--limit SIZE] [--dir DIR]      remove the oldest down to the limit
    ptdebug captures pack CAPTURE -o OUT [--force]      a self-contained copy, to move elsewhere

Layer: command line over adapter.capture.retention and image_store. DIR defaults to the
workspace's `.ptdebug/captures` in the current directory when there is one, else the user's
(`$XDG_DATA_HOME/ptdebug/captures`). CAPTURE is a capture's directory name or its path. Exit
status: 0 done, 1 the work failed (a capture in use, a copy that failed), 2 bad arguments or
input (no such capture, a malformed size, an existing OUT without --force). Every command takes
--json.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

ACTIONS = ("list", "pin", "unpin", "rm", "limit", "gc", "pack")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptdebug captures",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", nargs="?", default="list", choices=ACTIONS)
    parser.add_argument("names", nargs="*", metavar="CAPTURE|SIZE")
    parser.add_argument("--dir", metavar="DIR", help="the captures directory")
    parser.add_argument("--limit", metavar="SIZE", help="gc: this limit instead of the "
                        "directory's (2GiB, 500MB, bytes)")
    parser.add_argument("-o", "--output", metavar="OUT", help="pack: the bundle to write")
    parser.add_argument("--force", action="store_true",
                        help="rm: also pinned captures; pack: replace OUT")
    parser.add_argument("--json", action="store_true", help="the result as one JSON object")
    return parser


def default_directory() -> pathlib.Path:
    from adapter.capture import captures_dir
    workspace = captures_dir.captures_directory(None, os.getcwd())
    return workspace if workspace.is_dir() else captures_dir.user_captures_directory()


def main(argv: list[str]) -> int:
    from adapter.capture.retention import RetentionError
    options = build_parser().parse_args(argv)
    directory = pathlib.Path(options.dir) if options.dir else default_directory()
    if options.action != "pack" and not directory.is_dir() and (
            options.dir or options.action != "list"):
        return _fail(f"{directory}: no captures directory", 2)
    try:
        result, text = ACTION_FUNCTIONS[options.action](directory, options)
    except RetentionError as exc:
        status = 1 if "in use" in str(exc) else 2
        return _fail(str(exc), status)
    print(json.dumps(result) if options.json else text)
    return 1 if result.get("failed") else 0


def _fail(text: str, status: int) -> int:
    print(f"ptdebug captures: {text}", file=sys.stderr)
    return status


def _list(directory: pathlib.Path, options) -> tuple[dict, str]:
    from adapter.capture import retention
    if options.names:
        raise retention.RetentionError("list takes no CAPTURE")
    found = retention.captures(directory) if directory.is_dir() else []
    totals = retention.usage(directory, found) if found else {
        "captures": 0, "capture_bytes": 0, "store_bytes": 0, "unreferenced_store_bytes": 0,
        "total_bytes": 0}
    limit = retention.configured_limit(directory)
    result = {"directory": str(directory), "limit": limit, **totals,
              "items": [c.as_json() for c in found]}
    lines = [f"{'capture':52} {'own':>10} {'images':>10}  status", ]
    for c in found:
        flags = "".join((" pinned" if c.pinned else "", " in-use" if c.in_use else ""))
        lines.append(f"{c.name[:52]:52} {retention.show_size(c.own_bytes):>10} "
                     f"{retention.show_size(c.image_bytes):>10}  {c.status}{flags}")
    lines.append(f"{totals['captures']} captures in {directory}: "
                 f"{retention.show_size(totals['capture_bytes'])} of their own + "
                 f"{retention.show_size(totals['store_bytes'])} of images stored once = "
                 f"{retention.show_size(totals['total_bytes'])} (limit "
                 f"{retention.show_size(limit)})")
    return result, "\n".join(lines)


def _named(directory: pathlib.Path, options) -> list:
    from adapter.capture import retention
    if not options.names:
        raise retention.RetentionError(f"{options.action} needs at least one CAPTURE")
    return [retention.find(directory, name) for name in options.names]


def _pin(directory: pathlib.Path, options) -> tuple[dict, str]:
    from adapter.capture import retention
    wanted = options.action == "pin"
    chosen = _named(directory, options)
    for capture in chosen:
        retention.pin(capture, wanted)
    word = "pinned" if wanted else "unpinned"
    return ({word: [c.name for c in chosen]},
            "\n".join(f"{word} {c.name}" for c in chosen))


def _rm(directory: pathlib.Path, options) -> tuple[dict, str]:
    from adapter.capture import retention
    removed, freed = [], 0
    for capture in _named(directory, options):
        freed += retention.remove(directory, capture, force=options.force)
        removed.append(capture.name)
    return ({"removed": removed, "freed_bytes": freed},
            f"removed {', '.join(removed)} ({retention.show_size(freed)} freed)")


def _limit(directory: pathlib.Path, options) -> tuple[dict, str]:
    from adapter.capture import retention
    if len(options.names) > 1:
        raise retention.RetentionError("limit takes one SIZE")
    if options.names:
        retention.set_limit(directory, retention.parse_size(options.names[0]))
        outcome = retention.enforce(directory)
        return outcome, _said(outcome)
    limit = retention.configured_limit(directory)
    return {"limit": limit}, f"{retention.show_size(limit)} ({limit} bytes) for {directory}"


def _gc(directory: pathlib.Path, options) -> tuple[dict, str]:
    from adapter.capture import retention
    if options.names:
        raise retention.RetentionError("gc takes no CAPTURE (--limit SIZE sets the limit)")
    limit = retention.parse_size(options.limit) if options.limit is not None else None
    outcome = retention.enforce(directory, limit)
    return outcome, _said(outcome)


def _said(outcome: dict) -> str:
    from adapter.capture.retention import show_size
    removed = ", ".join(outcome["removed"]) or "nothing"
    text = (f"removed {removed}; {show_size(outcome['freed_bytes'])} freed, "
            f"{show_size(outcome['total_bytes'])} held (limit {show_size(outcome['limit'])})")
    if outcome["over"]:
        text += "; still over the limit: what is left is pinned or in use"
    return text


def _pack(directory: pathlib.Path, options) -> tuple[dict, str]:
    from adapter.capture import image_store, retention
    if len(options.names) != 1 or not options.output:
        raise retention.RetentionError("pack takes one CAPTURE and -o OUT")
    if os.path.lexists(options.output) and not options.force:
        raise retention.RetentionError(f"{options.output} exists; give --force to replace it")
    name = options.names[0]
    path = pathlib.Path(name)
    capture = path if (path / "manifest.json").is_file() else retention.find(directory,
                                                                              name).path
    lease = retention.Lease(capture)  # not removed while it is copied
    try:
        manifest = image_store.pack(capture, options.output, force=options.force)
    except image_store.StoreError as exc:
        raise retention.RetentionError(str(exc)) from None
    finally:
        lease.release()
    out = os.path.abspath(options.output)
    images = len(manifest.get("images") or ())
    return ({"output": out, "images": images},
            f"packed {capture} into {out} ({images} images inside it)")


ACTION_FUNCTIONS = {"list": _list, "pin": _pin, "unpin": _pin, "rm": _rm, "limit": _limit,
                    "gc": _gc, "pack": _pack}
