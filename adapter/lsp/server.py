"""`ptdebug lsp`: the hot-path language server (LSP over stdio, pygls). For a recorded capture
it shows, above each source line that ran, a code lens with its executions, cycles and share of
the window, and a hover with the branches taken there. For a stepper recording the lens leads
with instructions and names its time stepper time (hotlines.py says why); answers carry
`clock`: "stepper" | "tsc".

Layer: adapter.lsp, an offline view like adapter.export: it reads bundles (through
adapter.recording.recording and hotlines.py) and speaks LSP; it knows nothing of the DAP session.

Which capture: the latest one it was told about, by
- the notification `ptdebug/openBundle` {"bundle": PATH} (the VS Code extension sends it for
  every `ptdebug/capture` event and for bundles the user opens),
- the command `ptdebug.lsp.openBundle` [PATH] (workspace/executeCommand; answered once the
  capture is decoded and shown, so a client can show progress meanwhile),
- `initializationOptions.bundle` at start, or `ptdebug lsp --bundle PATH`.
After a capture is loaded the server asks the client to refresh its code lenses
(workspace/codeLens/refresh) when the client supports it. A bundle that cannot be read is
reported with window/showMessage and the previous capture stays shown.
"""
from __future__ import annotations

import argparse
import logging
import pathlib
import threading
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from adapter.lsp.hotlines import HotLines, hover_markdown, lens_title

log = logging.getLogger("ptdebug.lsp")

OPEN_BUNDLE = "ptdebug/openBundle"
OPEN_BUNDLE_COMMAND = "ptdebug.lsp.openBundle"
"""Answered when the capture is shown (the extension awaits it under a progress notification);
named apart from the extension's own `ptdebug.openBundle` command, which opens a dialog."""
SHOW_LINE_COMMAND = "ptdebug.showLine"
"""The command of each lens; its single argument holds the exact numbers of the line."""


class HotPathServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("ptdebug-hotlines", "0.1.0")
        self.hot: HotLines | None = None
        """The capture shown now."""
        self._initial_bundle: str | None = None
        """A capture to show once the client is initialized (--bundle, initializationOptions)."""
        self._lock = threading.Lock()

    def open_bundle(self, path: str) -> HotLines | None:
        """Decode `path` and show it; on failure tell the user and keep the previous one."""
        from adapter.recording.recording import Recording, TraceError
        try:
            decoded = Recording.open(path)
            hot = HotLines.from_decoded(decoded)
            for note in decoded.notes:
                self._tell(types.MessageType.Warning, f"ptdebug: {note}")
        except TraceError as exc:
            self._tell(types.MessageType.Error, f"ptdebug: cannot show the capture: {exc}")
            return None
        with self._lock:
            self.hot = hot
        cycles = (f"{hot.total_cycles:,} ns of stepper time ({hot.slowed_by}-slowed, not CPU "
                  "time)"
                  if hot.stepper else f"{hot.total_cycles:,} cycles")
        self._tell(types.MessageType.Log,
                   f"ptdebug: hot lines of {hot.bundle}: {hot.total_instructions:,} instructions, "
                   f"{cycles} in {sum(len(v) for v in hot.by_file.values())} "
                   f"lines of {len(hot.by_file)} file(s)")
        self._refresh()
        return hot

    def _tell(self, kind: types.MessageType, text: str) -> None:
        log.info(text)
        if kind == types.MessageType.Log:
            self.window_log_message(types.LogMessageParams(kind, text))
        else:
            self.window_show_message(types.ShowMessageParams(kind, text))

    def _refresh(self) -> None:
        capabilities = getattr(self.protocol, "client_capabilities", None)
        workspace = capabilities.workspace if capabilities is not None else None
        lens = getattr(workspace, "code_lens", None) if workspace else None
        if lens is not None and lens.refresh_support:
            self.workspace_code_lens_refresh(None)


server = HotPathServer()


def _document_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else None


@server.feature(types.INITIALIZED)
def initialized(ls: HotPathServer, params: types.InitializedParams) -> None:
    if ls._initial_bundle:
        ls.open_bundle(ls._initial_bundle)


@server.feature(types.INITIALIZE)
def initialize(ls: HotPathServer, params: types.InitializeParams) -> None:
    options = params.initialization_options
    bundle = options.get("bundle") if isinstance(options, dict) else \
        getattr(options, "bundle", None)
    if isinstance(bundle, str) and bundle:
        ls._initial_bundle = bundle


@server.feature(OPEN_BUNDLE)
def open_bundle_notification(ls: HotPathServer, params) -> None:
    bundle = params.get("bundle") if isinstance(params, dict) else getattr(params, "bundle", None)
    if not isinstance(bundle, str) or not bundle:
        ls._tell(types.MessageType.Error, f"ptdebug: {OPEN_BUNDLE} needs {{\"bundle\": PATH}}")
        return
    ls.open_bundle(bundle)


@server.command(OPEN_BUNDLE_COMMAND)
def open_bundle_command(ls: HotPathServer, *args) -> dict:
    paths = [a for a in (args[0] if len(args) == 1 and isinstance(args[0], list) else args)
             if isinstance(a, str)]
    if len(paths) != 1:
        ls._tell(types.MessageType.Error, f"ptdebug: {OPEN_BUNDLE_COMMAND} takes one bundle path")
        return {"ok": False}
    hot = ls.open_bundle(paths[0])
    return {"ok": hot is not None, "instructions": hot.total_instructions if hot else 0,
            "cycles": hot.total_cycles if hot else 0,
            "clock": ("stepper" if hot.stepper else "tsc") if hot else None}


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: HotPathServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    hot = ls.hot
    path = _document_path(params.text_document.uri)
    if hot is None or path is None:
        return []
    lenses = []
    for number, entry in sorted(hot.for_path(path).items()):
        if number < 1:
            continue
        position = types.Position(line=number - 1, character=0)
        lenses.append(types.CodeLens(
            range=types.Range(start=position, end=position),
            command=types.Command(title=lens_title(hot, entry), command=SHOW_LINE_COMMAND,
                                  arguments=[{
                                      "file": entry.file, "line": number,
                                      "executions": entry.executions,
                                      "instructions": entry.instructions,
                                      "cycles": entry.cycles, "share": hot.share(entry),
                                      "clock": "stepper" if hot.stepper else "tsc",
                                      "bundle": hot.bundle}])))
    return lenses


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: HotPathServer, params: types.HoverParams) -> types.Hover | None:
    hot = ls.hot
    path = _document_path(params.text_document.uri)
    if hot is None or path is None:
        return None
    entry = hot.for_path(path).get(params.position.line + 1)
    if entry is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown,
                                                    value=hover_markdown(hot, entry)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ptdebug lsp", description=" ".join(
        __doc__.split("\n\n")[0].split()))
    parser.add_argument("--bundle", help="show this capture from the start")
    parser.add_argument("--stdio", action="store_true",
                        help="talk LSP on stdin/stdout (the default; accepted for clients "
                             "that always pass it)")
    parser.add_argument("--log-file", help="write the server log here")
    options = parser.parse_args(argv)
    if options.log_file:
        logging.basicConfig(filename=options.log_file, level=logging.INFO)
    if options.bundle:
        if not (pathlib.Path(options.bundle) / "manifest.json").is_file():
            parser.error(f"--bundle {options.bundle}: not a bundle directory (no manifest.json)")
        server._initial_bundle = str(pathlib.Path(options.bundle).resolve())
    server.start_io()
    return 0
