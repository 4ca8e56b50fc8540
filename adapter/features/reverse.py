"""Reverse stepping over a capture: stepBack / reverseContinue walk the recorded history of the
stopped thread, forward requests replay it up to the live position and then run live.

Layer: features. Lives beside data_breakpoints.py and record_breakpoints.py in adapter/features
(DESIGN.md's layout names adapter/reverse.py; the features package is where the adapter keeps
every feature that plugs into the Session, so it is here). Reads captures from
features.record_breakpoints and their History (pt_decoder: previous/next line over a LineTable,
calls and returns, positions at addresses); knows DAP and the Session's hooks only.

Model: a paused thread with a capture is "live" until a stepBack puts it at a position of the
history ("replaying"). While replaying, `stackTrace` of that thread is the history's frames (the
function at the position, its callers found from the recorded calls, each with
`instructionPointerReference` and its DWARF source line) joined to debugpy's live stack;
`scopes` of a recorded frame are the Processor Trace scope and a scope that says plainly that
values were not recorded; `next`/`stepIn`/`stepOut`/`continue` move forward in the history and,
past its end, return to the live position (`continue` then lets the program run on). The
debuggee itself never moves while replaying: it stays paused where debugpy stopped it.
A replayed bundle (backends.replay) has no live position: its threads' captures carry
`replay_from`, every thread is in its history from the start, and a move past the end stops at
the last instruction instead of running live.
In a Go capture each recorded frame, the stop's text and the threads pane name the goroutine
that ran at the position (features.goroutine_view); stepping back by line keeps to the
goroutine at the cursor and passes over the runtime's own lines (golang/user_lines.py), as
Delve's `next` does; stepping by instruction goes wherever the thread went.
In a Python capture (the recorder wrote Python frame samples: features.python_replay) the
stack shows the recorded Python frames in place of the interpreter's, line steps in a Python
frame move by Python line and function, and breakpoints on .py files are hit where their line
runs; stepping by instruction is unchanged.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from adapter.features import python_replay, replay_hits
from adapter.features.captures import where
from adapter.powers import HandsOverThreads
from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import AdapterError, NotSupportedYet
from adapter.protocol.messages import Request
from adapter.protocol.schema import ReverseContinueArguments, StepBackArguments
from adapter.routes import REVERSE

START = "the start of the recorded history"
SEARCH_WINDOWS = 8
"""Most windows of a recording loaded in part that one reverseContinue or continue loads in
its search for a breakpoint hit (each up to a whole decode's worth, some seconds)."""
FRAME_ID_BASE = 1 << 27
"""Frame ids of recorded frames start here (debugpy's count from 1; variables use 1 << 28)."""
MAX_FRAMES = 64
NOT_RECORDED = ("values were not recorded: the trace holds the path the thread took "
                "(instructions, branches, time), not memory or registers; the frames below the "
                "recorded ones are live and show their values")


@dataclass
class Replay:
    capture: object
    position: int


class Reverse:
    """The reverse-execution feature of one session."""

    def __init__(self, session, recording):
        self.session = session
        self.recording = recording
        self.replays: dict[int, Replay] = {}
        """DAP thread id -> where it is in its capture, while replaying."""
        self.frames: dict[int, tuple[int, object, int]] = {}
        """recorded frame id -> (thread id, capture, position)."""
        self.python_frames: dict[int, object] = {}
        """recorded Python frame id -> its PyFrame (python_replay)."""
        self._next_frame = FRAME_ID_BASE
        recording.on_capture(self._captured)
        for command, handler in (("stackTrace", self._stack_trace), ("scopes", self._scopes),
                                 ("evaluate", self._evaluate), ("next", self._next),
                                 ("stepIn", self._step_in), ("stepOut", self._step_out),
                                 ("continue", self._continue)):
            session.routes.add(REVERSE, command, take=handler, active=self.intercepting)
        session.routes.on_events(REVERSE, self._filter_event)
        from adapter.features.goroutine_view import GoroutineView
        self.goroutines = GoroutineView(session, recording, self)
        """Go captures: the goroutine at the cursor in `threads` answers while replaying."""

    def _captured(self, capture) -> None:
        self.session.announce_capabilities(supportsStepBack=True)
        _python_lines(capture)
        if capture.replay_from is not None:
            # a replayed bundle's thread (backends.replay): in its history from the start
            self.replays[capture.thread_id] = Replay(capture, capture.replay_from)

    def intercepting(self, command: str) -> bool:
        """Whether its steps may take `command` now (Session.update_fast_path): only
        once there is a capture to replay."""
        return bool(self.recording.captures)

    def position_of(self, thread_id: int | None, capture) -> int:
        """The position the trace scope shows for `thread_id`: its replay position, or the
        capture's last instruction."""
        replay = self.replays.get(thread_id)
        if replay is not None and replay.capture is capture:
            return replay.position
        return len(capture.history) - 1

    # --- backwards ------------------------------------------------------------------------
    def _capture_of(self, thread_id: int):
        if not self.session.paused:
            raise AdapterError("reverse stepping needs the program paused")
        replay = self.replays.get(thread_id)
        if replay is not None:
            return replay.capture, replay.position
        capture = self.recording.latest(thread_id)
        if capture is None:
            raise NotSupportedYet(f"not supported yet: stepping back needs a recorded "
                                  f"history and thread {thread_id} has none: set a breakpoint "
                                  "in mode 'record' on its path first")
        return capture, None

    def step_back(self, request: Request, args: StepBackArguments) -> object:
        capture, position = self._capture_of(args.threadId)
        target, why = self._step_back(capture, position, args)
        if target == 0 and why == START and position is not None:
            # the start of a loaded window of a longer recording: on in the part before it
            moved = self._slide(capture, position, before=True)
            if moved is not None:
                target, why = self._step_back(capture, moved, args)
        self._stop_at(request, args.threadId, capture, target, "step", why)
        return DEFERRED

    def _step_back(self, capture, position: int | None, args: StepBackArguments):
        """(target position, why) of a step back from `position` (None: from the live
        position) in the capture's loaded history."""
        history = capture.history
        last = len(history) - 1
        entered = (self._enter_over_calls(capture, args.threadId)
                   if position is None and args.granularity != "instruction" else None)
        if entered is not None:
            return entered
        if position is None:
            target, why = last, (f"entered capture {capture.id} at its last instruction "
                                 "(the live position is just after it)")
            own = _last_of_goroutine(capture, args.threadId)
            if own is not None and not history.line_id(own, capture.lines):
                own = self._prev_line_in_goroutine(capture, own)[0].position  # a user line
            if own is not None and own != last:
                # a Go capture whose thread ran other goroutines after this one: enter where
                # this goroutine was last recorded
                target, why = own, (f"entered capture {capture.id} where goroutine "
                                    f"{args.threadId} ran last (other goroutines ran on the "
                                    "recorded thread after it)")
        elif args.granularity == "instruction":
            target = position - 1 if position > 0 else 0
            gap = history.gap_at(position) if position > 0 else None
            why = (START if position == 0 else
                   f"a gap in the trace ({gap.reason}) precedes this point" if gap else
                   "stepped back one instruction")
            if gap:
                target = position
        elif _in_python_code(capture, position):
            step = python_replay.step_back(capture, position)
            target, why = step.position, _python_why(step, "stepped back one Python line")
        else:
            step, others = self._prev_line_in_goroutine(capture, position)
            target = step.position
            why = {"found": "stepped back one line",
                   "start": START,
                   "goroutine": "the start of this goroutine's part of the recorded history",
                   "gap": f"a gap in the trace ({step.gap.reason if step.gap else ''}) "
                          "stops the step"}[step.reason]
            if others:
                why += (f" (passed over {others} instructions other goroutines ran on the "
                        "recorded thread meanwhile)")
        return target, why

    def _enter_over_calls(self, capture, thread_id: int) -> tuple[int, str] | None:
        """A step back by line from the live position of a goroutine whose capture ends where
        it stopped (a record window closed at a breakpoint): a reverse step-over, as Delve's
        and rr's reverse `next` (issue 34: from the line after `mu.Unlock()` it walked
        Unlock's lines first). The live pc (Delve's) is after the last recorded instruction;
        the step lands on the first instruction of the line run before it in the live frame,
        or of the line before that when the history ends inside the live line. None where
        this does not apply (not a Go session, another goroutine ran last, no live pc, a
        line the history does not place): the step then enters at the last instruction."""
        backend = self.session.backend
        history, lines = capture.history, capture.lines
        last = len(history) - 1
        if (not isinstance(backend, HandsOverThreads) or last < 0
                or _last_of_goroutine(capture, thread_id) not in (None, last)):
            return None
        try:
            _, pc = backend.thread_of(thread_id)
        except AdapterError:
            return None
        caller = _last_in_live_frame(history, last)
        if caller is None or not history.line_id(caller, lines):
            return None
        from array import array
        live_line = lines.line_ids(array("Q", [pc]), statements=True)[0]
        entered = (f"entered capture {capture.id} a line back from the live position (the "
                   "calls of that line passed over)")
        if history.line_id(caller, lines) != live_line:
            return history.line_start(caller, lines), entered
        step, others = self._prev_line_in_goroutine(capture, history.line_start(caller, lines))
        if step.reason != "found":
            return None
        return step.position, entered + _passed_over(others)

    def _to_the_end(self, capture) -> None:
        """Load the end of a capture loaded in part whose window is elsewhere: what the live
        position follows, and where a replay ends."""
        if not _loaded_to_the_end(capture):
            thread = capture.trace.threads[capture.stream]
            self._slide(capture, thread.recorded - 1 - thread.loaded_from, before=True)

    def _slide(self, capture, position: int, before: bool) -> int | None:
        """A capture of a thread loaded in part (a stream too long to decode whole: its end,
        or another window of it, Recording.load_window): load the window that goes on from
        `position` backwards (`before`) or forwards, and return `position` in it; None when
        the loaded history already reaches that end of the recording."""
        thread = capture.trace.threads[capture.stream]
        if thread.source is None:  # loaded whole
            return None
        first, end = thread.loaded_from, thread.loaded_from + len(thread.history)
        if (before and first == 0 and first + position < end) or (
                not before and _loaded_to_the_end(capture)):
            return None  # the loaded history already reaches that end
        from adapter.recording.recording import TraceError
        try:
            with self.session.progress.start(f"ptdebug: loading capture {capture.id}'s "
                                             "history", cancellable=False):
                new = capture.trace.load_window(capture.stream, first + position, before)
        except TraceError as exc:
            raise AdapterError(str(exc)) from None
        capture.window_loaded()
        _python_lines(capture)
        # recorded frame ids name positions of the window before: the client asks again
        self.frames = {k: v for k, v in self.frames.items() if v[1] is not capture}
        self.python_frames.clear()
        for thread_id, replay in self.replays.items():
            if replay.capture is capture and thread_id is not None:
                replay.position = max(0, min(first + replay.position - new.loaded_from,
                                             len(new.history) - 1))
        self.session.client.send_event("output", {"category": "console", "output": (
            f"ptdebug: capture {capture.id}: instructions {new.loaded_from:,} to "
            f"{new.loaded_from + len(new.history) - 1:,} of the {thread.recorded:,} recorded "
            "are loaded now\n")})
        return first + position - new.loaded_from

    @staticmethod
    def _prev_line_in_goroutine(capture, position: int):
        """History.prev_line, kept to the goroutine that ran at `position` in a Go capture: the
        stretches other goroutines ran on the recorded thread (after a channel operation parked
        this one, say) are passed over, from this goroutine's stretch to its previous one, as
        Delve's `next` stays in the goroutine it started in. Step.reason "goroutine" when the
        goroutine's first recorded stretch is reached. Returns (Step, instructions of other
        goroutines passed over)."""
        from adapter.features.goroutine_view import capture_goroutines
        from pt_decoder.history import Step
        history, lines = capture.history, capture.lines
        goroutines = capture_goroutines(capture)
        if goroutines is None:
            return history.prev_line(position, lines), 0
        goid = goroutines.at(position)[0]
        stretches = goroutines.index.ranges(goid)
        i = next((k for k, (a, b) in enumerate(stretches) if a <= position < b), None)
        if i is None:
            return history.prev_line(position, lines), 0
        pos, others = position, 0
        while True:
            step = history.prev_line(pos, lines, low=stretches[i][0])
            if step.reason == "found" and not history.line_id(step.position, lines):
                # stepping back out of a runtime function ends at its entry, a position
                # without a user line: on to the line that called it
                pos = step.position
                continue
            if step.reason != "start" or step.position == 0:
                return step, others
            if i == 0:  # the goroutine's first stretch in the window
                return Step(stretches[0][0], "goroutine"), others
            # on in this goroutine's previous stretch, from its last instruction (usually in
            # the runtime, which parked it: stepping back leaves that for the calling line)
            i -= 1
            others += stretches[i + 1][0] - stretches[i][1]
            pos = stretches[i][1] - 1

    def reverse_continue(self, request: Request, args: ReverseContinueArguments) -> object:
        capture, position = self._capture_of(args.threadId)
        start = len(capture.history) - 1 if position is None else position
        searched = 0
        while True:
            found = self._nearest_stop(capture, start, forward=False)
            if found is not None:
                self._stop_at(request, args.threadId, capture, found[0], "breakpoint",
                              "reverse-continued to a breakpoint hit in the recorded history",
                              found[1])
                return DEFERRED
            step = capture.history.prev_at(start, ()) if start > 0 else None
            bound = step.position if step is not None else 0
            if step is not None and step.gap:
                why = f"a gap in the trace ({step.gap.reason})"
                break
            why = START
            if not self.recording.replay_breakpoints():
                break
            if searched == SEARCH_WINDOWS:
                why = (f"the start of the {SEARCH_WINDOWS} parts of the recording searched "
                       "(reverse-continue again to search before them)")
                break
            # a recording loaded in part: the search goes on in the part before the window
            moved = self._slide(capture, 0, before=True)
            if moved is None:
                break
            searched += 1
            start = moved
        self._stop_at(request, args.threadId, capture, bound, "step",
                      f"no breakpoint hit before this point: stopped at {why}")
        return DEFERRED

    def _nearest_stop(self, capture, position: int, forward: bool):
        """(position, hits there) of the nearest breakpoint stop after (`forward`) or before
        `position` that no gap separates from it (replay_hits: hit conditions applied on the
        recorded hits), or None."""
        history = capture.history
        if forward:
            if position + 1 >= len(history):
                return None
            bound = history.next_at(position, ())
            limit = bound.position if bound.reason == "gap" else len(history) - 1
        else:
            if position <= 0:
                return None
            bound = history.prev_at(position, ())
            limit = bound.position if bound.reason == "gap" else 0
        return replay_hits.nearest(capture, self.recording.replay_breakpoints(), position,
                                   forward, limit)

    # --- forwards -------------------------------------------------------------------------
    def _forward_step(self, request: Request, move) -> object:
        thread_id = (request.raw.get("arguments") or {}).get("threadId")
        replay = self.replays.get(thread_id)
        if replay is None:
            return None
        granularity = (request.raw.get("arguments") or {}).get("granularity")
        target, why = move(replay.capture, replay.capture.history, replay.position, granularity)
        if target is None:
            # the end of a loaded window of a longer recording: on in the part after it
            moved = self._slide(replay.capture, replay.position, before=False)
            if moved is not None:
                target, why = move(replay.capture, replay.capture.history, moved, granularity)
        if target is None and not _loaded_to_the_end(replay.capture):
            # the step did not end in the part loaded after the window either (a function
            # that returns parts later): it stops there, not at the live position
            target = len(replay.capture.history) - 1
            why = "the end of the part of the recording loaded (step again to go on)"
        if target is None:
            self._go_live(request, thread_id, "the end of the recorded history")
        else:
            self._stop_at(request, thread_id, replay.capture, target, "step", why)
        return DEFERRED

    def _next(self, request: Request) -> object:
        return self._forward_step(request, lambda c, h, p, g: _line_or_instruction(
            c, h, p, g, over_calls=True))

    def _step_in(self, request: Request) -> object:
        return self._forward_step(request, lambda c, h, p, g: _line_or_instruction(
            c, h, p, g, over_calls=False))

    def _step_out(self, request: Request) -> object:
        def move(capture, history, position, granularity):
            if granularity != "instruction" and _in_python_code(capture, position):
                step = python_replay.step_out(capture, position)
                if step is None or step.reason == "end" or step.position <= position:
                    return None, ""
                return step.position, _python_why(step, "stepped out to the caller's next "
                                                  "Python line")
            from pt_decoder.history import Step

            def out_of(pos):
                ret = history.next_return(pos)
                if ret is None or ret + 1 >= len(history):
                    return Step(len(history) - 1, "end")
                return Step(ret + 1, "found")
            step, others = _forward_in_goroutine(capture, position, out_of)
            if step.reason != "found":
                return None, ""
            return step.position, "stepped out in the recorded history" + _passed_over(others)
        return self._forward_step(request, move)

    def _continue(self, request: Request) -> object:
        thread_id = (request.raw.get("arguments") or {}).get("threadId")
        replay = self.replays.get(thread_id)
        if replay is None:
            return None
        capture = replay.capture
        found = self._nearest_stop(capture, replay.position, forward=True)
        searched = 0
        while found is None and searched < SEARCH_WINDOWS and \
                self.recording.replay_breakpoints():
            # a recording loaded in part: the search goes on in the part after the window
            moved = self._slide(capture, len(capture.history) - 1, before=False)
            if moved is None:
                break
            searched += 1
            found = self._nearest_stop(capture, moved, forward=True)
        if found is not None:
            self._stop_at(request, thread_id, capture, found[0], "breakpoint",
                          "replayed to a breakpoint hit in the recorded history", found[1])
            return DEFERRED
        if searched == SEARCH_WINDOWS and not _loaded_to_the_end(capture):
            self._stop_at(request, thread_id, capture, len(capture.history) - 1, "step",
                          f"no breakpoint hit in the {SEARCH_WINDOWS} parts of the recording "
                          "searched: stopped at their end (continue again to search after "
                          "them)")
            return DEFERRED
        self._to_the_end(capture)
        if replay.capture.replay_from is not None:  # a replay: nothing runs after the history
            self._go_live(request, thread_id, "no breakpoint hit after this point: stopped at "
                          "the end of the recorded history")
            return DEFERRED
        # Past the end of the history: back to the live position, and run on from there.
        self.replays.pop(thread_id, None)
        self.session.client.send_event("output", {"category": "console", "output":
            f"ptdebug: replayed capture {replay.capture.id} to its end; running live\n"})
        return None

    def _go_live(self, request: Request, thread_id: int, why: str) -> None:
        replay = self.replays.get(thread_id)
        if replay is not None and replay.capture.replay_from is not None:
            # a replayed bundle has no live position: the replay stays at its last instruction
            self._stop_at(request, thread_id, replay.capture, len(replay.capture.history) - 1,
                          "step", why)
            return
        replay = self.replays.pop(thread_id, None)
        request.respond({})
        self.session.client.send_event("stopped", {
            "reason": "step", "threadId": thread_id, "allThreadsStopped": True,
            "description": "back at the live position: the end of capture "
                           f"{replay.capture.id if replay else '?'} was reached"})

    def _stop_at(self, request: Request, thread_id: int, capture, position: int, reason: str,
                 why: str, hits: list | None = None) -> None:
        before = self.replays.get(thread_id)
        self.replays[thread_id] = Replay(capture, position)
        history = capture.history
        from adapter.features.goroutine_view import switch_note
        place = where(capture, history.ip(position))
        frame = python_replay.frame_at(capture, position)
        if frame is not None:
            place = (f"Python {frame.qualname} ({os.path.basename(frame.filename)}:"
                     f"{frame.line}), in {place}")
        thread = capture.trace.threads[capture.stream]
        if thread.recorded is not None:  # loaded in part: positions in the whole recording
            counted = f"instruction {thread.loaded_from + position} of {thread.recorded}"
        else:
            counted = f"instruction {position} of {len(history)}"
        text = f"{why}: {counted} in capture {capture.id}, {place}"
        text += switch_note(capture, before.position if before is not None and
                            before.capture is capture else None, position)
        body = {"reason": reason, "threadId": thread_id, "allThreadsStopped": True,
                "preserveFocusHint": False}
        if hits:
            text += f" ({replay_hits.describe(hits)})"
            ids = [h.breakpoint.id for h in hits if h.breakpoint.id is not None]
            if ids:
                body["hitBreakpointIds"] = ids
        body.update({"description": text, "text": text})
        request.respond({})
        self.session.client.send_event("stopped", body)

    # --- what a replaying thread shows ----------------------------------------------------
    def _stack_trace(self, request: Request) -> object:
        arguments = request.raw.get("arguments") or {}
        thread_id = arguments.get("threadId")
        replay = self.replays.get(thread_id)
        if replay is None:
            return None
        capture, history = replay.capture, replay.capture.history
        frames = []
        position = replay.position
        live_below = capture.replay_from is None
        merged = python_replay.merged_stack(capture, position, MAX_FRAMES,
                                            live_below=live_below)
        live_frames = []
        if live_below:  # the live frames below the recorded ones
            live = self.session.backend.request("stackTrace", {"threadId": thread_id,
                                                               "levels": MAX_FRAMES}, timeout=10)
            if live.success:
                live_frames = (live.raw.get("body") or {}).get("stackFrames") or []
            if merged is not None and live_frames:
                live_frames = python_replay.join_live(merged, live_frames)
        if merged is not None:  # a Python capture: Python frames in place of the interpreter
            frames = [self._frame(thread_id, capture, entry.position) if entry.python is None
                      else self._python_frame(thread_id, capture, entry) for entry in merged]
            position = None
        while position is not None and len(frames) < MAX_FRAMES:
            frames.append(self._frame(thread_id, capture, position))
            position = history.caller(position)
        frames.extend(live_frames)
        start = arguments.get("startFrame") or 0
        levels = arguments.get("levels") or 0
        shown = frames[start:start + levels] if levels else frames[start:]
        return {"stackFrames": shown, "totalFrames": len(frames)}

    def _frame(self, thread_id: int, capture, position: int) -> dict:
        from adapter.features.goroutine_view import here
        ip = capture.history.ip(position)
        name, _ = capture.function(ip)
        self._next_frame += 1
        self.frames[self._next_frame] = (thread_id, capture, position)
        ran = here(capture, position)  # Go: the goroutine the recorded thread ran there
        tag = f"recorded, insn {position}" + (f", {ran}" if ran else "")
        frame = {"id": self._next_frame, "name": f"{name} [{tag}]",
                 "line": 0, "column": 0, "instructionPointerReference": f"{ip:#x}",
                 "presentationHint": "normal"}
        line = capture.line(ip)
        if line is not None:
            frame.update({"source": {"name": line[0].rsplit("/", 1)[-1], "path": line[0]},
                          "line": line[1], "column": 1})
        return frame

    def _python_frame(self, thread_id: int, capture, entry) -> dict:
        """A recorded Python frame (python_replay.merged_stack): function, file and line."""
        frame = entry.python
        self._next_frame += 1
        self.frames[self._next_frame] = (thread_id, capture, entry.position)
        self.python_frames[self._next_frame] = frame
        name = python_replay.frame_name(frame)
        out = {"id": self._next_frame, "name": f"{name} [recorded Python, insn "
               f"{entry.position}]", "line": 0, "column": 0, "presentationHint": "normal"}
        if frame is not None and frame.filename:
            out.update({"source": {"name": os.path.basename(frame.filename),
                                   "path": frame.filename},
                        "line": frame.line, "column": 1})
        return out

    def _scopes(self, request: Request) -> object:
        from adapter.features.trace_scope import scope
        frame_id = (request.raw.get("arguments") or {}).get("frameId")
        frame = self.frames.get(frame_id)
        if frame is None:
            return None
        _, capture, position = frame
        python = self.python_frames.get(frame_id)
        text = (f"the values of {python_replay.frame_name(python)}'s local variables "
                f"were not recorded (a Python frame of the recording): {NOT_RECORDED}"
                if frame_id in self.python_frames else NOT_RECORDED)
        note = self.recording.reference(lambda: [{
            "name": "note", "value": text, "variablesReference": 0}])
        return {"scopes": [
            {"name": "Locals (not recorded)", "variablesReference": note, "expensive": False},
            scope(self.recording, capture, position)]}

    def _evaluate(self, request: Request) -> object:
        if (request.raw.get("arguments") or {}).get("frameId") in self.frames:
            raise AdapterError(f"cannot evaluate in a recorded frame: {NOT_RECORDED}")
        return None

    def _filter_event(self, raw: dict) -> bool:
        if raw.get("event") in ("continued", "stopped", "terminated", "exited"):
            # (a replayed bundle's threads have no live position to go back to: they stay)
            self.replays = {thread_id: replay for thread_id, replay in self.replays.items()
                            if replay.capture.replay_from is not None}
            self.frames.clear()
            self.python_frames.clear()
        return False


def _last_of_goroutine(capture, goid: int) -> int | None:
    """The last position goroutine `goid` ran in a Go capture; None elsewhere."""
    from adapter.features.goroutine_view import capture_goroutines
    goroutines = capture_goroutines(capture)
    stretches = goroutines.index.ranges(goid) if goroutines is not None else []
    return stretches[-1][1] - 1 if stretches else None


def _last_in_live_frame(history, last: int) -> int | None:
    """The last recorded instruction of the frame the thread is in just after `last` (the
    live position): the call that led to `last`'s return when `last` returns (None if that
    call came before the history), else `last` itself."""
    from pt_decoder import insn_flags
    if history.flags(last) & insn_flags.RETURN:
        return history.matching_call(last)
    return last


def _line_or_instruction(capture, history, position: int, granularity,
                         over_calls: bool) -> tuple[int | None, str]:
    """The target of `next` (over calls) or `stepIn`: by Python line in a Python frame, by
    source line elsewhere, by instruction with granularity `instruction`."""
    python = _python_line(capture, position, granularity, over_calls)
    if python is not None:
        return _forward(python, position, history, "stepped one Python line")
    if granularity == "instruction":
        return _forward(None, position, history)
    lines = capture.lines
    here = history.line_id(position, lines)
    step, others = _forward_in_goroutine(
        capture, position, lambda pos: history.next_line(pos, lines, over_calls=over_calls),
        landed=lambda pos: history.line_id(pos, lines) not in (0, here))
    return _forward(step, position, history, "stepped one line" + _passed_over(others))


def _passed_over(others: int) -> str:
    return (f" (passed over {others} instructions other goroutines ran on the recorded thread "
            "meanwhile)" if others else "")


def _forward_in_goroutine(capture, position: int, step_from, landed=None):
    """`step_from(pos) -> Step`, a forward step in the history, kept to the goroutine that
    ran at `position` in a Go capture, as Delve's `next` and `stepout` stay in the goroutine
    they began in: a step that ends in the stretch of the recorded thread's history holding
    `position` stands. One that leaves it (the goroutine was switched out first: a channel
    operation parked it, say, and the runtime on g0 and other goroutines ran) goes on in the
    goroutine's next stretch, from where it is back in the function it left (the runtime
    frames that parked it have returned), and is taken again from there: call depths are
    counted along the thread, so they hold within a stretch only. `landed(pos)`: that return
    to the function already ends the step (a line step resumed on a new line). Returns
    (Step, instructions of other goroutines passed over); Step "end" when the goroutine's
    recorded part ends first."""
    from adapter.features.goroutine_view import capture_goroutines
    from pt_decoder.history import Step
    history = capture.history
    step = step_from(position)
    goroutines = capture_goroutines(capture)
    if goroutines is None:
        return step, 0
    stretches = goroutines.index.ranges(goroutines.at(position)[0])
    i = next((k for k, (a, b) in enumerate(stretches) if a <= position < b), None)
    if i is None or step.position < stretches[i][1]:
        return step, 0
    function = _function_addresses(capture, history.ip(position))
    others = 0
    while i + 1 < len(stretches):
        others += stretches[i + 1][0] - stretches[i][1]
        i += 1
        start, stop = stretches[i]
        back = history.next_at(start - 1, function)
        if back.reason != "found" or back.position >= stop:
            continue  # still in the runtime when switched out again
        if landed is not None and landed(back.position):
            return Step(back.position, "found"), others
        step = step_from(back.position)
        if step.position < stop:
            return step, others
    return Step(len(history) - 1, "end"), others


def _function_addresses(capture, ip: int) -> list[int]:
    """The recorded instruction addresses of the function holding `ip`, ascending (a function
    is contiguous: from its start up to the first address another symbol covers)."""
    name, offset = capture.function(ip)
    start = ip - offset
    addresses = capture.history.distinct_ips
    k = bisect.bisect_left(addresses, start)
    found = []
    while k < len(addresses) and capture.function(addresses[k]) == (name, addresses[k] - start):
        found.append(addresses[k])
        k += 1
    return found


def _forward(step, position: int, history,
             found: str = "stepped one line") -> tuple[int | None, str]:
    """The target of a forward step (None: past the end, back to live)."""
    if step is None:  # instruction granularity
        if position + 1 >= len(history):
            return None, ""
        gap = history.gap_at(position + 1)
        return position + 1, (f"stepped over a gap ({gap.reason})" if gap else
                              "stepped one instruction")
    if step.reason == "end" or step.position <= position:
        return None, ""
    if step.reason == "gap":
        return step.position, f"a gap in the trace ({step.gap.reason}) stops the step"
    return step.position, found


def _python_line(capture, position: int, granularity, over_calls: bool):
    """The Python line step from `position` (python_replay), or None where the position is no
    Python frame's or the step is by instruction."""
    if granularity == "instruction" or not _in_python_code(capture, position):
        return None
    return python_replay.step_forward(capture, position, over_calls)


def _in_python_code(capture, position: int) -> bool:
    """Whether a line step at `position` moves by Python line: a Python frame runs there and
    the instruction is the interpreter's, not native code of the user's with its own source
    lines (a C extension's function called from Python is stepped by its C lines)."""
    return (python_replay.frame_at(capture, position) is not None
            and not capture.history.line_id(position, capture.lines))


def _python_why(step, found: str) -> str:
    """The stop's text of a Python line step."""
    return {"found": found, "start": "the start of the recorded history",
            "end": "the end of the recorded history",
            "gap": f"a gap in the trace ({step.gap.reason if step.gap else ''}) stops the "
                   "step"}[step.reason]


def _python_lines(capture) -> None:
    """A Python capture steps by the native lines of the user's own C only (python_replay)."""
    if isinstance(capture.trace.manifest.get("python"), dict) and capture._lines is None:
        capture._lines = python_replay.native_lines(capture)


def _loaded_to_the_end(capture) -> bool:
    """Whether the capture's loaded history reaches the end of its recorded stream."""
    thread = capture.trace.threads[capture.stream]
    return thread.recorded is None or thread.loaded_from + len(thread.history) >= \
        thread.recorded
