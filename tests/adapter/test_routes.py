"""The route table (adapter/routes.py) answers for every DAP request, and is what routes them:
its client rows are the client handlers, its replay rows the replay backend's answers, and a
step it does not declare cannot plug in."""
from __future__ import annotations

import json

import pytest

from adapter import routes
from adapter.backends.replay import ReplayBackend
from adapter.client import ClientHandlers
from adapter.routes import ROUTES, Router
from tests.dap_schema import dap_schema_path


def _schema_commands() -> set[str]:
    """Every request command of the DAP schema (its `XRequest` definitions' `command` enum)."""
    definitions = json.loads(dap_schema_path().read_text())["definitions"]
    commands = set()
    for name, definition in definitions.items():
        if not name.endswith("Request") or name == "Request":
            continue
        for part in definition.get("allOf", ()):
            command = (part.get("properties") or {}).get("command") or {}
            commands.update(command.get("enum", ()))
    return commands


def test_the_table_answers_for_every_dap_command():
    commands = _schema_commands()
    assert len(commands) > 40  # the schema was read
    for command in sorted(commands):
        row = routes.route(command)
        # a row says who answers: the client handler, or the backend after the row's steps
        assert row.client or row is routes.FORWARDED or row.takes or row.watches or row.replay, \
            command
        # every step of a row is a step some feature plugs in
        assert all(step in STEPS for step in row.takes + row.watches), command
    # and every row names a command of the schema, or one of ptdebug's own
    assert all(command in commands or command.startswith("ptdebug/") for command in ROUTES)


STEPS = {routes.THREAD_GUARD, routes.RUN_CONTROL, routes.RECORD, routes.REVERSE,
         routes.TRACE_SCOPE, routes.GOROUTINE_VIEW, routes.GOROUTINE_HISTORY,
         routes.DATA_BREAKPOINTS, routes.BACKEND}


def test_the_client_rows_are_the_client_handlers():
    handlers = {name[:-len("_request")] for name in dir(ClientHandlers)
                if name.endswith("_request") and name != "default_request"}
    assert handlers == {command for command, row in ROUTES.items() if row.client}


def test_the_replay_rows_are_the_replay_answers():
    answers = {name[1:].replace("ptdebug_", "ptdebug/") for name in vars(ReplayBackend)
               if name.startswith("_") and not name.startswith("__")}
    replayed = {command for command, row in ROUTES.items() if row.replay}
    assert replayed <= answers
    # its other private methods are helpers, not answers of requests the table forgot
    assert not (answers - replayed) & _schema_commands()


def test_a_step_the_row_does_not_declare_cannot_plug_in():
    router = Router()
    with pytest.raises(ValueError, match="does not let 'record' into 'next'"):
        router.add(routes.RECORD, "next", take=lambda request: None)
    with pytest.raises(ValueError, match="names 'nobody'"):
        router.on_events("nobody", lambda raw: False)


def test_the_steps_run_in_the_rows_order_whatever_the_order_they_plug_in():
    router = Router()
    router.add(routes.RUN_CONTROL, "next", take=lambda request: "run_control")
    router.add(routes.REVERSE, "next", take=lambda request: "reverse")
    router.add(routes.THREAD_GUARD, "next", take=lambda request: "thread_guard")
    assert [take(None) for take in router.takers("next")] == [
        "thread_guard", "reverse", "run_control"]
    seen: list[str] = []
    router.add(routes.TRACE_SCOPE, "scopes", watch=lambda request: lambda r: seen.append("trace"))
    router.add(routes.DATA_BREAKPOINTS, "scopes", watch=lambda request: lambda r: seen.append("data"))
    watcher = router.watcher("scopes", None)
    assert watcher is not None
    watcher({})
    assert seen == ["data", "trace"]


def test_a_step_idle_now_leaves_its_command_to_the_fast_relay():
    router = Router()
    assert router.idle("threads")
    active = [False]
    router.add(routes.GOROUTINE_VIEW, "threads", watch=lambda request: None,
               active=lambda command: active[0])
    assert router.idle("threads")
    active[0] = True
    assert not router.idle("threads")


def test_an_event_goes_through_its_row_until_a_step_consumes_it():
    router = Router()
    seen: list[str] = []
    router.on_events(routes.DATA_BREAKPOINTS, lambda raw: seen.append("data") or False)
    router.on_events(routes.RECORD, lambda raw: seen.append("record") or True)
    router.on_events(routes.THREAD_GUARD, lambda raw: seen.append("guard") or False)
    assert router.filter_event({"event": "stopped"})
    assert seen == ["record"]  # consumed: data breakpoints, after it, never saw it
    seen.clear()
    assert not router.filter_event({"event": "thread"})
    assert seen == ["guard"]
    seen.clear()
    assert not router.filter_event({"event": "output"})
    assert seen == []
