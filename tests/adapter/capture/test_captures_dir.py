"""Where captures are kept (adapter/capture/captures_dir.py) and how a bundle becomes
self-contained (bundle.copy_images_in), on a real stepper recording of a C program made with
`--no-copy-images`: after the copy it decodes the same path with the program removed."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from adapter.capture import captures_dir
from adapter.capture.bundle import copy_images_in, validate

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_the_directory_follows_the_configuration_then_the_workspace_then_xdg(tmp_path,
                                                                             monkeypatch):
    assert captures_dir.captures_directory("/data/caps", "/ws") == pathlib.Path("/data/caps")
    assert captures_dir.captures_directory("caps", "/ws") == pathlib.Path("/ws/caps")
    assert captures_dir.captures_directory(None, "/ws") == pathlib.Path("/ws/.ptdebug/captures")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert captures_dir.captures_directory(None, None) == tmp_path / "data/ptdebug/captures"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # as the XDG specification says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert captures_dir.captures_directory(None, None) == \
        tmp_path / "home/.local/share/ptdebug/captures"


def test_a_workspace_directory_gets_a_gitignore_and_names_never_collide(tmp_path):
    directory = captures_dir.prepare(tmp_path / ".ptdebug" / "captures")
    assert (tmp_path / ".ptdebug" / ".gitignore").read_text().splitlines()[-1] == "*"
    first = captures_dir.new_capture_directory(directory, "/src/my service.py", 1)
    second = captures_dir.new_capture_directory(directory, "/src/my service.py", 1)
    assert first != second and first.is_dir() and second.is_dir()
    assert first.name.endswith("-my_service-capture-1") and second.name == first.name + "-2"
    elsewhere = captures_dir.prepare(tmp_path / "mine")
    assert not (tmp_path / ".gitignore").exists() and elsewhere.is_dir()


def test_an_unwritable_directory_is_refused(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(OSError):
        captures_dir.prepare(blocked / "captures")


def _decode(bundle: pathlib.Path) -> list[str]:
    run = subprocess.run([sys.executable, "-m", "adapter.cli", "decode", str(bundle),
                          "--format", "ips"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return [line for line in run.stdout.splitlines() if line and not line.startswith("[")]


@pytest.fixture
def referencing_bundle(tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """A stepper bundle that references the program's files by path (as a session's recorder
    writes them), and the program."""
    program = tmp_path / "bin" / "hotpath"
    program.parent.mkdir()
    subprocess.run(["gcc", "-O0", "-g", "-o", str(program),
                    str(ROOT / "tests/fixtures/programs/hotpath.c")], check=True)
    bundle = tmp_path / "bundle"
    run = subprocess.run([sys.executable, "-m", "adapter.cli", "record", "--backend", "stepper",
                          "--no-copy-images", "--from", "serve", "--until-return", "-o",
                          str(bundle), "--", str(program), "2"], cwd=ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    return bundle, program


def test_copying_in_the_images_the_trace_ran_makes_the_bundle_self_contained(
        referencing_bundle, tmp_path):
    bundle, program = referencing_bundle
    before = json.loads((bundle / "manifest.json").read_text())
    assert any(i["file"] == str(program) for i in before["images"])
    ips = _decode(bundle)
    used = sorted({int(ip, 16) for ip in ips})
    copies: dict = {}
    after = copy_images_in(bundle, used, copies)
    assert after["status"] == before["status"] == "complete"
    assert all(not os.path.isabs(i["file"]) for i in after["images"]), after["images"]
    assert [i["path"] for i in after["images"] if i["kind"] != "snapshot"] == [str(program)]
    unused = {i["path"] for i in after["unused_images"]}
    assert unused and str(program) not in unused  # libc and ld.so: the window never ran them
    assert validate(bundle) == []
    # a second capture of the same program links the first one's copy
    again = tmp_path / "again"
    shutil.copytree(bundle, again)
    (again / "manifest.json").write_text(json.dumps(before))
    shutil.rmtree(again / "images")
    copy_images_in(again, used, copies)
    copied = next(i["file"] for i in after["images"] if i["path"] == str(program))
    assert os.stat(again / copied).st_ino == os.stat(bundle / copied).st_ino
    # moved, program gone: the same path
    moved = tmp_path / "moved"
    shutil.move(bundle, moved)
    shutil.rmtree(program.parent)
    assert _decode(moved) == ips


def test_a_copy_that_fails_leaves_the_manifest_as_it_was(referencing_bundle):
    bundle, program = referencing_bundle
    before = (bundle / "manifest.json").read_text()
    program.unlink()
    with pytest.raises(OSError):
        copy_images_in(bundle)
    assert (bundle / "manifest.json").read_text() == before
