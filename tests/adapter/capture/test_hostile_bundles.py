"""Bundles are untrusted input (issue 17): `decode`, `dump`, `export` and `latency` on a
malformed manifest, or on one whose files point at /dev/zero, a FIFO, ../../etc/passwd or an
absolute path outside the bundle, gave tracebacks, MemoryError, a hang, or read the file. Now
each is a one-line error naming the field, exit status 2, in bounded time; the checks live in
one place, pt_decoder/bundle_reader.py. `import` and `decode` of /dev/zero, a FIFO, an empty or
a random file say what is wrong too, and so does `dump` of the first three."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from bundle_samples import write_loop_bundle

ROOT = pathlib.Path(__file__).resolve().parents[3]
COMMANDS = {
    "decode": lambda b, tmp: ["decode", str(b), "--format", "ips"],
    "dump": lambda b, tmp: ["dump", str(b)],
    "export": lambda b, tmp: ["export", "pprof", str(b), "-o", str(tmp / "out.pb"), "--force"],
    "latency": lambda b, tmp: ["latency", str(b), "--from", "0x400005", "--to", "0x400007"],
}


def ptdebug(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adapter.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _set(path: str, value):
    """A mutation setting manifest[path...] (dotted, list indices as numbers)."""
    def apply(manifest, root):
        *parents, last = path.split(".")
        node = manifest
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key = int(last) if isinstance(node, list) else last
        if value is _DELETE:
            del node[key]
        else:
            node[key] = value(root) if callable(value) else value
    return apply


_DELETE = object()


def _fifo(name):
    def make(root):
        os.mkfifo(root / name)
        return name
    return make


def _link(name, target):
    def make(root):
        os.symlink(target, root / name)
        return name
    return make


# (mutation, text the one-line error must hold)
FIELD_MUTATIONS = {
    "format_type": (_set("format", 5), "format"),
    "version_string": (_set("version", "1"), "version"),
    "streams_not_a_list": (_set("streams", "streams/100.pt"), "streams must be an array"),
    "stream_not_an_object": (_set("streams", [5]), "streams[0] must be an object"),
    "stream_file_missing": (_set("streams.0.file", _DELETE), "streams[0].file is required"),
    "stream_file_number": (_set("streams.0.file", 5), "streams[0].file must be a string"),
    "stream_tid_string": (_set("streams.0.tid", "100"), "streams[0].tid must be an integer"),
    "image_address_string": (_set("images.0.load_address", "0x400000"),
                             "images[0].load_address must be an integer"),
    "image_address_negative": (_set("images.0.load_address", -1),
                               "images[0].load_address must be in"),
    "image_past_2_64": (_set("images.0.load_address", (1 << 64) - 2), "past 2^64"),
    "image_size_huge": (_set("images.0.size", 1 << 70), "images[0].size must be in"),
    "cpu_string": (_set("cpu", "GenuineIntel"), "cpu must be an object"),
    "cpu_family_string": (_set("cpu.family", "6"), "cpu.family must be an integer"),
    "tsc_hz_zero": (_set("timing", {"tsc_hz": 0}), "timing.tsc_hz must be in"),
    "threads_tid_list": (_set("threads", [{"tid": [1]}]), "threads[0].tid must be an integer"),
    "command_numbers": (_set("command", [1, 2]), "command[0] must be a string"),
    "stream_dev_zero": (_set("streams.0.file", "/dev/zero"),
                        ".file '/dev/zero' is outside the bundle"),
    "stream_fifo": (_set("streams.0.file", _fifo("streams/fifo.pt")), "not a regular file"),
    "stream_escapes": (_set("streams.0.file", "../../../../../../etc/passwd"),
                       "outside the bundle"),
    "stream_absolute": (_set("streams.0.file", "/etc/passwd"), "outside the bundle"),
    "stream_link_out": (_set("streams.0.file", _link("streams/out.pt", "/etc/passwd")),
                        "outside the bundle"),
    "image_dev_zero": (lambda m, r: m["images"][0].update(file="/dev/zero", path="/dev/zero"),
                       "not a regular file"),
    "image_absolute_elsewhere": (_set("images.0.file", "/etc/passwd"), "outside the bundle"),
    "image_escapes": (_set("images.0.file", "../../../../../../etc/passwd"),
                      "outside the bundle"),
    "image_fifo": (_set("images.0.file", _fifo("images/fifo.bin")), "not a regular file"),
}


def _broken_manifest_text(kind: str, root: pathlib.Path) -> str | None:
    """Manifests that are no JSON object at all (None: manifest.json replaced otherwise)."""
    if kind == "deep":
        return '{"format": "ptdebug-bundle", "version": 1, "x": ' + "[" * 5000 + "]" * 5000 + "}"
    if kind == "not_json":
        return '{"format": "ptdebug-bundle", '
    if kind == "array":
        return "[1, 2, 3]"
    (root / "manifest.json").unlink()
    if kind == "fifo":
        os.mkfifo(root / "manifest.json")
    elif kind == "link_dev_zero":
        os.symlink("/dev/zero", root / "manifest.json")
    return None


def _check_refused(result: subprocess.CompletedProcess, text: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and len(lines) == 1, result.stderr
    assert text in lines[0], (text, lines[0])


@pytest.fixture
def bundle(tmp_path) -> pathlib.Path:
    return write_loop_bundle(tmp_path / "loop.bundle")


def test_the_sample_bundle_is_sound(bundle, tmp_path):
    """Every command reads the unbroken bundle (the baseline the mutations break)."""
    for name, command in COMMANDS.items():
        result = ptdebug(*command(bundle, tmp_path))
        assert result.returncode == 0, (name, result.stderr)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("mutation", sorted(FIELD_MUTATIONS))
def test_a_malformed_manifest_field_is_one_line_naming_it(bundle, tmp_path, command, mutation):
    mutate, text = FIELD_MUTATIONS[mutation]
    if command == "dump" and mutation in ("image_dev_zero", "image_absolute_elsewhere",
                                          "image_escapes", "image_fifo"):
        pytest.skip("dump reads packets only: an image's file is never opened")
    manifest = json.loads((bundle / "manifest.json").read_text())
    mutate(manifest, bundle)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    _check_refused(ptdebug(*COMMANDS[command](bundle, tmp_path)), text)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind, text", [("deep", "nested deeper"), ("not_json", "not JSON"),
                                        ("array", "must be a JSON object"),
                                        ("fifo", "not a regular file"),
                                        ("link_dev_zero", "manifest.json")])
def test_a_manifest_that_is_no_json_object_is_one_line(bundle, tmp_path, command, kind, text):
    written = _broken_manifest_text(kind, bundle)
    if written is not None:
        (bundle / "manifest.json").write_text(written)
    _check_refused(ptdebug(*COMMANDS[command](bundle, tmp_path)), text)


def test_an_image_referenced_at_its_recorded_path_is_read(bundle, tmp_path):
    """What --no-copy-images writes (file == path, absolute) stays readable."""
    outside = tmp_path / "loop.bin"
    outside.write_bytes((bundle / "images" / "loop.bin").read_bytes())
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["images"][0].update(file=str(outside), path=str(outside))
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = ptdebug("decode", str(bundle), "--format", "ips")
    assert result.returncode == 0 and "400009" in result.stdout, result.stderr


@pytest.mark.parametrize("make, text", [
    (lambda tmp: "/dev/zero", "not a regular file"),
    (lambda tmp: (os.mkfifo(tmp / "f"), str(tmp / "f"))[1], "not a regular file"),
    (lambda tmp: ((tmp / "e").write_bytes(b"") and None) or str(tmp / "e"), "empty"),
])
def test_decode_dump_and_import_of_non_traces_say_what_is_wrong(tmp_path, make, text):
    path = make(tmp_path)
    _check_refused(ptdebug("decode", path), text)
    _check_refused(ptdebug("dump", path), text)
    imported = ptdebug("import", path, "-o", str(tmp_path / "out"))
    assert imported.returncode == 2 and "Traceback" not in imported.stderr, imported.stderr
    assert len(imported.stderr.strip().splitlines()) == 1, imported.stderr


def test_a_random_trace_that_decodes_to_nothing_says_so(tmp_path):
    """As libipt's ptxed: no PSB to sync to is no error (exit 0); unlike it, a line says so."""
    path = tmp_path / "random.pt"
    path.write_bytes(bytes((i * 131 + 7) % 251 for i in range(5000)).replace(b"\x02", b"\x00"))
    result = ptdebug("decode", str(path))
    assert result.returncode == 0
    assert "no instruction decoded from 5000 bytes" in result.stderr


@pytest.mark.parametrize("size", [1 << 40, (1 << 63) - 1])
def test_an_image_size_past_the_file_maps_what_the_file_holds(bundle, tmp_path, size):
    """Found by the bundle fuzzer: `size` 2^63-1 raised OverflowError in decode, and 2^40 tried
    to allocate a terabyte. The mapping is the part of the file that exists."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["images"][0]["size"] = size
    manifest["images"][0]["load_address"] = 0x400000
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    for command in ("decode", "export"):
        result = ptdebug(*COMMANDS[command](bundle, tmp_path))
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
