"""A Go launch configuration's `env` is the program's, not the build's (as in vscode-go, where
Delve builds with its own environment): `{"HOME": null}` once took the Go build cache away from
`go build` and the session ended with the build's error. The program still gets the env."""
from __future__ import annotations

import pytest
from go_support import output_text, start_go

pytestmark = pytest.mark.timeout(180)

PROGRAM = """package main

import (
	"fmt"
	"os"
)

func main() {
	home, set := os.LookupEnv("HOME")
	fmt.Printf("home set=%v %q probe=%s\\n", set, home, os.Getenv("PTDEBUG_PROBE"))
}
"""


def test_env_that_unsets_home_reaches_the_program_and_not_the_build(start_adapter, tmp_path):
    source = tmp_path / "main.go"
    source.write_text(PROGRAM)
    run = start_adapter()
    client = run.client
    env = {"HOME": None, "XDG_CACHE_HOME": None, "GOCACHE": None, "PTDEBUG_PROBE": "here"}
    response = start_go(client, "launch", {"program": str(source), "env": env})
    assert response["success"], response
    assert client.expect_event("exited", timeout=60)["body"]["exitCode"] == 0
    client.expect_event("terminated", timeout=30)
    assert 'home set=false "" probe=here' in output_text(client)
    client.call("disconnect", {})
    assert run.wait_exit() == 0
