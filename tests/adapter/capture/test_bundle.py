"""The bundle format: written, read back, validated; partial from the start;
copied images vs referenced ones; errors that say which part is wrong."""
from __future__ import annotations

import json
import sys

import pytest

from adapter.capture.bundle import (
    FORMAT,
    VERSION,
    Bundle,
    BundleError,
    BundleWriter,
    read_manifest,
    validate,
)

CPU = {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 4}


def test_a_new_bundle_says_partial_until_finished(tmp_path):
    w = BundleWriter(tmp_path / "b", "stepper", CPU)
    m = read_manifest(tmp_path / "b")
    assert (m["format"], m["version"], m["status"]) == (FORMAT, VERSION, "partial")
    assert m["partial_reason"] == "recording in progress"
    w.add_stream_bytes(42, b"\x02\x82" * 8, pid=40)
    w.add_image(sys.executable, 0x400000, 0, 4096, build_id="ab" * 20, pid=40)
    w.add_snapshot("vdso.bin", 0x7fff0000, b"\x90" * 64, pid=40, origin="[vdso]")
    w.add_thread(42, 40, "prog")
    m = w.finish()
    assert m["status"] == "complete" and m["partial_reason"] is None
    assert validate(tmp_path / "b") == []
    b = Bundle.open(tmp_path / "b")
    assert b.complete and b.stream_bytes(b.streams[0]) == b"\x02\x82" * 8
    assert b.streams[0]["size"] == 16 and b.streams[0]["tid"] == 42
    exe, vdso = b.images
    assert not exe["file"].startswith("/")          # copied into the bundle
    assert b.image_path(exe).read_bytes() == open(sys.executable, "rb").read()
    assert (vdso["kind"], vdso["path"], vdso["size"]) == ("snapshot", "[vdso]", 64)


def test_referenced_images_and_partial_reason(tmp_path):
    w = BundleWriter(tmp_path / "b", "stepper", CPU, copy_images=False)
    w.add_image(sys.executable, 0x400000, 0, 4096)
    m = w.finish("the target exited")
    assert m["status"] == "partial" and m["partial_reason"] == "the target exited"
    assert m["images"][0]["file"] == sys.executable
    assert validate(tmp_path / "b") == []


def test_validate_names_what_is_wrong(tmp_path):
    w = BundleWriter(tmp_path / "b", "stepper", CPU)
    w.add_stream_bytes(1, b"\x00" * 10)
    w.finish()
    (tmp_path / "b" / "streams" / "1.pt").write_bytes(b"\x00" * 3)
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    m["images"].append({"path": "/x", "file": "images/missing", "load_address": 0,
                        "offset": 0, "size": 1})
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(m))
    problems = validate(tmp_path / "b")
    assert "stream streams/1.pt: 3 bytes, manifest says 10" in problems
    assert "image 'images/missing' missing" in problems


def test_read_errors(tmp_path):
    with pytest.raises(BundleError, match="not a bundle directory"):
        read_manifest(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="no manifest.json"):
        read_manifest(tmp_path / "empty")
    (tmp_path / "empty" / "manifest.json").write_text('{"format": "ptdebug-bundle", '
                                                      '"version": 99}')
    with pytest.raises(BundleError, match="version 99 is not supported"):
        read_manifest(tmp_path / "empty")


def test_refuses_to_overwrite_a_directory_that_is_not_a_bundle(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "precious.txt").write_text("keep me")
    with pytest.raises(BundleError, match="not a bundle; refusing"):
        BundleWriter(tmp_path / "home", "stepper", CPU)
    assert (tmp_path / "home" / "precious.txt").exists()
