"""A person at VS Code, for the real-VS-Code tier: code-server started on 127.0.0.1 and driven
through its UI in Chromium with Playwright (sync API).

`CodeServer` is one code-server process with a throwaway user-data folder and the extensions
folder the .vsix was installed into; `Workbench` is the editor page: it opens files from the
Explorer, clicks the gutter, presses keys, clicks toolbar buttons and reads what the views
show, as text. Every wait is for a UI element, with a generous limit (the machine is shared),
and a wait that runs out fails with what every view showed then (`describe()`), beside a
screenshot. Selectors are VS Code's own DOM (1.139); `describe()` is what to read first when
a newer VS Code moves something.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable

UI_TIMEOUT = 60.0
"""Seconds to wait for a UI element: the editor, a view's row, a stop. Generous, since a
2-core machine shared with other test runs was seen to take 20 s to load the workbench."""


DOC_TOP = {"x": 0, "y": 0, "width": 700, "height": 680}
"""The side bar's Variables and Call Stack beside the editor's upper lines (1400x900 page)."""
DOC_BOTTOM = {"x": 0, "y": 430, "width": 700, "height": 440}
"""The side bar's Call Stack, Breakpoints and Trace Captures beside the editor's lower lines."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marker_line(path: str | os.PathLike, name: str) -> int:
    """The 1-based line of `# @name` in a program."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# @{name}"):
                return number
    raise LookupError(f"no '# @{name}' marker in {path}")


class CodeServer:
    """`code-server` on 127.0.0.1 (auth none) serving one workspace folder."""

    def __init__(self, launcher: pathlib.Path, extensions: pathlib.Path, home: pathlib.Path,
                 user_settings: dict, env: dict | None = None):
        self.launcher = launcher
        self.extensions = extensions
        self.home = home
        self.user_data = home / "user-data"
        (self.user_data / "User").mkdir(parents=True, exist_ok=True)
        (self.user_data / "User" / "settings.json").write_text(json.dumps(user_settings, indent=2))
        self.port = free_port()
        self.log_path = home / "code-server.log"
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = UI_TIMEOUT) -> None:
        env = dict(os.environ if self.env is None else self.env)
        # Its own config file, so that a user's ~/.config/code-server/config.yaml (a password,
        # another port) never applies to the test's server.
        config = self.home / "config.yaml"
        config.write_text(f"bind-addr: 127.0.0.1:{self.port}\nauth: none\ncert: false\n")
        argv = [str(self.launcher), "--config", str(config), "--bind-addr",
                f"127.0.0.1:{self.port}", "--auth", "none", "--disable-telemetry",
                "--disable-update-check", "--disable-workspace-trust",
                "--disable-getting-started-override", "--user-data-dir", str(self.user_data),
                "--extensions-dir", str(self.extensions)]
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"code-server exited ({self.proc.returncode}):\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"code-server did not answer on {self.url} in {timeout} s:\n"
                             f"{self.log()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Ends code-server and everything it started (extension host, adapter, debuggee):
        its own process group, which start_new_session gave it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def exthost_log(self) -> str:
        logs = sorted((self.user_data / "logs").glob("*/exthost*/remoteexthost.log"))
        return logs[-1].read_text(errors="replace") if logs else ""

    def extension_logs(self) -> str:
        """The tail of every log the extension host and its output channels wrote (the
        *ptdebug* channel names the adapter's command line)."""
        out = []
        logs = self.user_data / "logs"
        if logs.is_dir():
            for path in sorted(logs.rglob("*.log")):
                if "ptdebug" in path.name or "exthost" in path.name:
                    text = path.read_text(errors="replace")[-2000:]
                    out.append(f"--- {path.relative_to(logs)}\n{text}")
        return "\n".join(out)


class Workbench:
    """The VS Code page in Chromium, used as a person uses it."""

    def __init__(self, page, server: CodeServer, artifacts: pathlib.Path):
        self.page = page
        self.server = server
        self.artifacts = artifacts
        self.shots = 0

    # --- seeing -------------------------------------------------------------------------
    def screenshot(self, name: str, clip: dict | None = None) -> pathlib.Path:
        """The page as PNG under artifacts/, numbered in order; `clip` (x, y, width, height)
        keeps part of it (DOC_TOP, DOC_BOTTOM: docs/vscode.md's pictures, under 100 KB)."""
        self.shots += 1
        path = self.artifacts / f"{self.shots:02d}-{name}.png"
        try:
            self.page.screenshot(path=str(path), clip=clip)
        except Exception as error:  # noqa: BLE001 (a screenshot never hides the real failure)
            path.with_suffix(".txt").write_text(f"no screenshot: {error}")
        return path

    def pane_text(self, title: str) -> str:
        """The text of the side-bar view titled `title` (Call Stack, Variables, Breakpoints,
        Trace Captures...), '' when it is not shown or collapsed."""
        pane = self.pane(title)
        if pane.count() == 0:
            return ""
        body = pane.first.locator(".pane-body")
        try:
            return body.inner_text(timeout=2000) if body.count() else ""
        except Exception:  # noqa: BLE001 (the view went away while being read)
            return ""

    def pane(self, title: str):
        """The side-bar view titled `title`."""
        return self.page.locator(".pane").filter(has=self.page.locator(
            ".pane-header", has_text=re.compile(rf"^\s*{re.escape(title)}", re.IGNORECASE)))

    def pane_header(self, title: str) -> str:
        """The header of view `title`: the Call Stack's says why the program paused."""
        header = self.pane(title).locator(".pane-header")
        return header.first.inner_text(timeout=2000) if header.count() else ""

    def expand_pane(self, title: str) -> None:
        """Opens view `title` when it is collapsed (a click on its header)."""
        header = self.pane(title).locator(".pane-header").first
        self.wait_for(f"the {title} view", lambda: header.count(), timeout=20)
        if header.get_attribute("aria-expanded") == "false":
            header.click()

    def notifications(self) -> str:
        """Every notification toast, the notification centre and a dialog, as text."""
        texts = []
        for selector in (".notification-toast", ".notifications-center .notification-list-item",
                         ".monaco-dialog-box"):
            for item in self.page.locator(selector).all():
                try:
                    texts.append(item.inner_text(timeout=1000).strip())
                except Exception:  # noqa: BLE001 (it closed while being read)
                    pass
        return "\n".join(t for t in texts if t)

    def status_bar(self) -> str:
        try:
            return self.page.locator(".part.statusbar").inner_text(timeout=2000)
        except Exception:  # noqa: BLE001
            return ""

    def describe(self) -> str:
        """What each view shows now: the text a failure message carries."""
        parts = []
        for title in ("Variables", "Watch", "Call Stack", "Breakpoints", "Trace Captures",
                      "Processor Trace"):
            header = self.pane_header(title).replace("\n", " ").strip() if self.pane(
                title).count() else ""
            parts.append(f"[{header or title}]\n{self.pane_text(title).strip() or '(not shown)'}")
        parts.append(f"[notifications]\n{self.notifications() or '(none)'}")
        parts.append(f"[debug console]\n{self.debug_console() or '(not shown)'}")
        parts.append(f"[status bar]\n{self.status_bar().strip()}")
        return "\n".join(parts)

    def debug_console(self) -> str:
        try:
            repl = self.page.locator(".repl .monaco-list-rows")
            return repl.inner_text(timeout=1000) if repl.count() else ""
        except Exception:  # noqa: BLE001
            return ""

    def wait_for(self, what: str, predicate: Callable[[], object],
                 timeout: float = UI_TIMEOUT, poll: float = 0.25) -> object:
        """Polls `predicate` until it is truthy; on time out fails saying `what` and what every
        view showed, beside a screenshot."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = predicate()
            except Exception:  # noqa: BLE001 (an element detached between two reads)
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                shot = self.screenshot("timeout")
                raise AssertionError(f"waited {timeout:.0f} s for {what}; screenshot {shot}\n"
                                     f"{self.describe()}\n[code-server log]\n{self.server.log()}")
            time.sleep(poll)

    # --- doing --------------------------------------------------------------------------
    def open(self, folder: pathlib.Path) -> None:
        self.page.goto(f"{self.server.url}/?folder={folder}", timeout=UI_TIMEOUT * 1000)
        self.wait_for("the workbench and its Explorer",
                      lambda: self.page.locator(".explorer-folders-view .monaco-list-row").count())
        # Keys pressed before the extension host is up can be lost: an F5 that early opened
        # the Run and Debug view and started nothing (the ptdebug channel stayed empty). A
        # person waits for the window to settle; the extension host's log says when it has.
        self.wait_for("the extension host (its log: 'Eager extensions activated')",
                      lambda: "Eager extensions activated" in self.server.exthost_log())

    def open_file(self, name: str) -> None:
        """Clicks `name` in the Explorer and waits for its editor."""
        self.page.locator(".explorer-folders-view .monaco-list-row", has_text=name).first.click()
        self.wait_for(f"the editor of {name}", lambda: self.page.locator(
            f'.tabs-container .tab[aria-label^="{name}"]').count() and self.line_box(1))

    def editor(self):
        return self.page.locator(".editor-instance .monaco-editor").first

    def line_box(self, line: int) -> dict | None:
        """The bounding box of line `line`'s number in the editor's margin (None: not shown)."""
        numbers = self.editor().locator(".margin-view-overlays .line-numbers")
        for element in numbers.all():
            if element.inner_text().strip() == str(line):
                return element.bounding_box()
        return None

    def line_visible(self, line: int) -> bool:
        """Whether line `line`'s number is inside the editor's visible area."""
        box = self.line_box(line)
        if box is None:
            return False
        view = self.editor().bounding_box()
        return view["y"] <= box["y"] and box["y"] + box["height"] <= view["y"] + view["height"]

    def code_lenses(self) -> list[str]:
        """The text of each code lens shown in the editor (the lines on screen)."""
        return [t.strip() for t in self.editor().locator(".codelens-decoration")
                .evaluate_all("lenses => lenses.map(l => l.innerText)")]

    def breakpoint_glyphs(self) -> list[str]:
        """The classes of the breakpoint glyphs in the editor's margin (one per breakpoint)."""
        glyphs = self.editor().locator(".margin-view-overlays [class*='codicon-debug-breakpoint'],"
                                       " .glyph-margin-widgets [class*='codicon-debug-breakpoint']")
        return [g.get_attribute("class") or "" for g in glyphs.all()]

    def go_to_line(self, line: int) -> None:
        """Ctrl+G and the line number: the editor scrolls `line` into view."""
        self.focus_editor()
        self.press("Control+g")
        box = self.page.locator(".quick-input-widget input")
        self.wait_for("the Go to Line box", lambda: box.is_visible(), timeout=20)
        box.fill(f":{line}")
        self.press("Enter")
        self.wait_for(f"line {line} in the editor", lambda: self.line_box(line), timeout=20)

    def margin_lines(self, codicon: str) -> list[int]:
        """The lines whose margin shows glyph `codicon` (`debug-stackframe`: the editor's
        arrow at the line where the program is paused), among the lines on screen."""
        # The glyphs are widgets of their own (.glyph-margin-widgets), placed at their line's
        # height: matched to the line numbers by their vertical middle.
        glyphs = [g.bounding_box() for g in self.editor().locator(
            f".glyph-margin-widgets .codicon-{codicon}").all()]
        lines = []
        for number in self.editor().locator(".margin-view-overlays .line-numbers").all():
            box = number.bounding_box()
            if box and any(g and box["y"] <= g["y"] + g["height"] / 2 <= box["y"] + box["height"]
                           for g in glyphs):
                lines.append(int(number.inner_text().strip()))
        return lines

    def click_gutter(self, line: int) -> None:
        """Clicks the glyph margin left of line `line`: a person's way to set a breakpoint."""
        if not self.line_visible(line):
            self.go_to_line(line)
        box = self.wait_for(f"line {line} in the editor", lambda: self.line_box(line))
        margin = self.editor().locator(".margin").bounding_box()
        # The glyph margin is the margin's first column, left of the line numbers.
        x = margin["x"] + 9
        y = box["y"] + box["height"] / 2
        before = len(self.breakpoint_glyphs())
        self.page.mouse.move(x, y)
        self.page.mouse.click(x, y)
        self.wait_for(f"a breakpoint glyph at line {line}",
                      lambda: len(self.breakpoint_glyphs()) > before, timeout=15)

    def press(self, keys: str) -> None:
        self.page.keyboard.press(keys)

    def focus_editor(self) -> None:
        self.editor().locator(".view-lines").click()

    def toolbar_button(self, label: str):
        """A button of the debug toolbar (Continue, Step Over, Step Back...)."""
        return self.page.locator(f".debug-toolbar .action-item a[aria-label^='{label}'], "
                                 f".debug-toolbar .action-item [aria-label^='{label}']").first

    def row(self, view: str, text: str):
        """The first row of side-bar view `view` whose text contains `text`."""
        return self.pane(view).locator(".monaco-list-row", has_text=text).first

    def variable(self, name: str) -> str | None:
        """The value the Variables view shows for `name` (None: no such row). Read from the
        row's accessible name, `NAME, value VALUE`, which VS Code gives each variable."""
        prefix = f"{name}, value "
        for label in self.pane("Variables").locator(".monaco-list-row").evaluate_all(
                "rows => rows.map(r => r.getAttribute('aria-label') || '')"):
            if label.startswith(prefix):
                return label[len(prefix):]
        return None

    def expand_scope(self, scope: str) -> None:
        """Opens scope `scope` (Locals) in the Variables view when it is collapsed."""
        row = self.pane("Variables").locator(f'.monaco-list-row[aria-label="Scope {scope}"]')
        self.wait_for(f"the {scope} scope in the Variables view", lambda: row.count())
        if row.first.get_attribute("aria-expanded") == "false":
            row.first.click()

    def context_menu(self, target, item: str) -> None:
        """Right-clicks `target` and picks `item` in VS Code's context menu."""
        target.click(button="right")
        menu = self.page.locator(".context-view .monaco-menu")
        entry = menu.locator(".action-item").filter(
            has_text=re.compile(rf"^\s*{re.escape(item)}")).locator(".action-menu-item")
        self.wait_for(f"the context-menu item {item!r}", lambda: entry.count(), timeout=20)
        # A menu sometimes ignores the first click that comes right after it opened (seen in
        # Chromium headless: the item is highlighted, the menu stays): click until it closes.
        for _ in range(3):
            if not menu.count() or not menu.first.is_visible():
                return
            entry.first.click()
            time.sleep(0.5)
        self.wait_for(f"the context menu to close after {item!r}",
                      lambda: not menu.count() or not menu.first.is_visible(), timeout=10)

    def pick(self, label: str) -> None:
        """Picks the entry `label` of the quick pick now open."""
        entry = self.page.locator(".quick-input-widget .monaco-list-row").filter(
            has_text=re.compile(rf"^\s*{re.escape(label)}"))
        self.wait_for(f"{label!r} in the quick pick", lambda: entry.count(), timeout=20)
        entry.first.click()

    def set_breakpoint_mode(self, line: int, mode: str, file: str = "app.py") -> None:
        """Switches the breakpoint at `file`:`line` to `mode` the way VS Code offers it: the
        Breakpoints view's context menu, *Edit Mode...*, then the mode in the quick pick (the
        modes are the adapter's `breakpointModes`)."""
        row = self.page.locator(".pane", has=self.page.locator(
            ".pane-header", has_text="Breakpoints")).locator(
            f'.monaco-list-row[aria-label^="{file} {line},"]')
        self.wait_for(f"the breakpoint {file}:{line} in the Breakpoints view", lambda: row.count())
        self.context_menu(row.first, "Edit Mode")
        self.pick(mode)


def copy_workspace(app: pathlib.Path, folder: pathlib.Path, launch: dict,
                   settings: dict | None = None,
                   files: list[pathlib.Path] | None = None) -> pathlib.Path:
    """A workspace folder with the program (and `files`, by name) and a launch.json (and
    .vscode/settings.json)."""
    (folder / ".vscode").mkdir(parents=True)
    for source in [app, *(files or [])]:
        shutil.copy(source, folder / source.name)
    (folder / ".vscode" / "launch.json").write_text(json.dumps(
        {"version": "0.2.0", "configurations": [launch]}, indent=2))
    if settings:
        (folder / ".vscode" / "settings.json").write_text(json.dumps(settings, indent=2))
    return folder
