"""Captures share the code they ran through one store (adapter/capture/image_store.py), the
captures directory keeps within its limit (retention.py), and `ptdebug captures` shows and
manages it, on real stepper recordings of the C++ fixture (a program over a shared library,
libstdc++ and libc). Issue 33: every capture of a torch service copied libtorch_cpu.so
(~490 MB) into its bundle, and nothing ever removed a capture."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from cxx_fixture import ROOT, build_cxx_service, build_library, decoded_ips, ptdebug, record

from adapter.capture import image_store, retention

pytestmark = pytest.mark.timeout(240)


def disk_bytes(directory: pathlib.Path) -> int:
    """Bytes of the files under `directory`, each inode once (what `du` counts)."""
    seen, total = set(), 0
    for folder, _, files in os.walk(directory):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def keep(bundle: pathlib.Path, known: dict) -> int:
    """What a session does with a capture once decoded; returns the bytes the store grew by."""
    _, added, warnings = image_store.store_images_in(bundle, sorted(set(decoded_ips(bundle))),
                                                     known)
    assert warnings == []
    return added


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """(captures directory with three kept captures of one program, program, library)."""
    base = tmp_path_factory.mktemp("store")
    program, library = build_cxx_service(base / "bin")
    captures = base / "captures"
    captures.mkdir()
    known: dict = {}
    for n in (1, 2, 3):
        keep(record(program, captures / f"capture-{n}"), known)
    return captures, program, library


@pytest.fixture
def captures(template, tmp_path) -> pathlib.Path:
    copy = tmp_path / "captures"
    shutil.copytree(template[0], copy)
    return copy


def test_two_captures_of_one_program_store_its_files_once(tmp_path):
    program, library = build_cxx_service(tmp_path / "bin")
    directory = tmp_path / "captures"
    directory.mkdir()
    known: dict = {}
    first = record(program, directory / "first")
    first_added = keep(first, known)
    after_first = disk_bytes(directory)
    second = record(program, directory / "second")
    streams = sum(f.stat().st_size for f in (second / "streams").iterdir())
    second_added = keep(second, known)
    after_second = disk_bytes(directory)
    # the second capture adds its trace and manifest, and nothing to the store
    assert first_added > 2_000_000  # libstdc++ and libc: the first capture stored them
    assert second_added == 0
    assert after_second - after_first < streams + 64 * 1024, (after_first, after_second)
    stored = {p.name: p for p in (directory / ".store" / "images").iterdir()}
    manifests = [json.loads((b / "manifest.json").read_text()) for b in (first, second)]
    for manifest in manifests:
        for image in manifest["images"]:
            if image["kind"] != "snapshot":
                assert image["file"].startswith("../.store/images/"), image
                assert pathlib.Path(image["file"]).name in stored
    library_entries = [i["file"] for m in manifests for i in m["images"]
                       if i["path"] == str(library)]
    assert len(library_entries) == 2 and len(set(library_entries)) == 1
    held = stored[pathlib.Path(library_entries[0]).name]
    assert held.stat().st_nlink == 1  # one file on disk, whatever the number of captures
    assert oct(held.stat().st_mode & 0o777) == "0o444"
    # no capture holds a copy of its own
    assert not any(p.stat().st_size > 100_000 for b in (first, second)
                   for p in (b / "images").iterdir())
    # the captures decode through the store, the same path (at other addresses: ASLR)
    assert len(decoded_ips(first)) == len(decoded_ips(second)) > 1000


def test_ptdebug_captures_lists_sizes_with_shared_images_counted_once(captures):
    listing = json.loads(ptdebug("captures", "--dir", str(captures), "--json").stdout)
    store = sum(p.stat().st_size for p in (captures / ".store" / "images").iterdir())
    assert [c["name"] for c in listing["items"]] == ["capture-1", "capture-2", "capture-3"]
    assert listing["store_bytes"] == store
    assert listing["total_bytes"] == listing["capture_bytes"] + store == disk_bytes(captures) - \
        (captures / ".store" / "lock").stat().st_size
    assert all(c["image_bytes"] == store and c["bytes"] < 200_000 for c in listing["items"])
    assert listing["limit"] == 2 << 30
    text = ptdebug("captures", "--dir", str(captures)).stdout
    assert "capture-2" in text and "3 captures in" in text and "stored once" in text
    assert "limit 2.0 GiB" in text


def hold_lease(capture: pathlib.Path) -> subprocess.Popen:
    """Another process (a session) looking at `capture`: it holds the lease until its stdin
    closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from adapter.capture.retention import Lease; "
         f"lease = Lease({str(capture)!r}); print('held', flush=True); sys.stdin.read()"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_the_limit_removes_the_oldest_captures_but_never_pinned_or_in_use_ones(captures):
    ptdebug("captures", "--dir", str(captures), "pin", "capture-1")
    holder = hold_lease(captures / "capture-2")
    try:
        gc = json.loads(ptdebug("captures", "--dir", str(captures), "gc", "--limit", "1",
                                "--json").stdout)
        assert gc["removed"] == ["capture-3"] and gc["over"] is True
        assert (captures / "capture-1").is_dir() and (captures / "capture-2").is_dir()
        listing = json.loads(ptdebug("captures", "--dir", str(captures), "--json").stdout)
        assert [(c["name"], c["pinned"], c["in_use"]) for c in listing["items"]] == [
            ("capture-1", True, False), ("capture-2", False, True)]
        refused = ptdebug("captures", "--dir", str(captures), "rm", "capture-2", check=False)
        assert refused.returncode == 1 and (captures / "capture-2").is_dir()
        assert refused.stderr.strip() == "ptdebug captures: capture-2 is in use by a debug " \
                                          "session"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # the session ended: capture-2 goes; the pinned one stays, with the images it names
    text = ptdebug("captures", "--dir", str(captures), "gc", "--limit", "1MB").stdout
    assert "removed capture-2" in text and "still over the limit" in text
    assert (captures / "capture-1" / "manifest.json").is_file()
    assert decoded_ips(captures / "capture-1")
    refused = ptdebug("captures", "--dir", str(captures), "rm", "capture-1", check=False)
    assert refused.returncode == 2 and "pinned" in refused.stderr
    ptdebug("captures", "--dir", str(captures), "rm", "capture-1", "--force")
    # no capture names the store's files any more: they are gone too
    assert list((captures / ".store" / "images").iterdir()) == []
    assert json.loads(ptdebug("captures", "--dir", str(captures), "--json").stdout)[
        "total_bytes"] == 0


def test_a_limit_set_for_the_directory_is_kept_and_enforced(captures):
    before = retention.usage(captures)["total_bytes"]
    one = retention.captures(captures)[-1].own_bytes
    limit = before - one // 2  # one capture over
    out = json.loads(ptdebug("captures", "--dir", str(captures), "limit", str(limit),
                             "--json").stdout)
    assert out["removed"] == ["capture-1"] and out["over"] is False
    assert json.loads(ptdebug("captures", "--dir", str(captures), "limit", "--json").stdout) \
        == {"limit": limit}
    bad = ptdebug("captures", "--dir", str(captures), "limit", "lots", check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "ptdebug captures: 'lots' is not a size (e.g. 2GiB, 500MB, " \
                                 "1048576)"
    missing = ptdebug("captures", "--dir", str(captures), "pin", "capture-9", check=False)
    assert missing.returncode == 2 and "capture-9: no such capture" in missing.stderr


def test_a_packed_capture_decodes_elsewhere_without_the_store(template, captures, tmp_path):
    capture = captures / "capture-1"
    before = decoded_ips(capture)
    packed = tmp_path / "moved" / "packed"
    out = json.loads(ptdebug("captures", "--dir", str(captures), "pack", "capture-1", "-o",
                             str(packed), "--json").stdout)
    assert out["output"] == str(packed)
    manifest = json.loads((packed / "manifest.json").read_text())
    assert all(i["file"].startswith("images/") for i in manifest["images"]), manifest["images"]
    assert not (packed / ".lease").exists()
    again = ptdebug("captures", "--dir", str(captures), "pack", "capture-1", "-o", str(packed),
                    check=False)
    assert again.returncode == 2 and again.stderr.strip() == \
        f"ptdebug captures: {packed} exists; give --force to replace it"
    # elsewhere, the captures directory (and its store) gone: the same path
    shutil.rmtree(captures)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(packed, elsewhere)
    shutil.rmtree(packed.parent)
    assert decoded_ips(elsewhere) == before


def test_a_capture_moved_without_its_store_says_so(captures, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(captures / "capture-1", moved)
    run = ptdebug("decode", str(moved), "--format", "ips", check=False)
    assert run.returncode == 2
    assert "is not in the captures store" in run.stderr and "ptdebug captures pack" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_changed_image_is_reported_not_decoded(tmp_path):
    program, library = build_cxx_service(tmp_path / "bin")
    referencing = record(program, tmp_path / "referencing")
    assert decoded_ips(referencing)
    build_library(library, "-O2")  # rebuilt in place: other code, other build-id
    run = ptdebug("decode", str(referencing), "--format", "ips", check=False)
    assert run.returncode == 2, run.stdout[-500:]
    assert f"{library} changed since the capture" in run.stderr, run.stderr
    # a stored file that changed is refused as well
    program, library = build_cxx_service(tmp_path / "bin2")
    directory = tmp_path / "captures"
    stored = record(program, directory / "capture")
    keep(stored, {})
    entry = next(i for i in json.loads((stored / "manifest.json").read_text())["images"]
                 if i["path"] == str(library))
    target = stored / entry["file"]
    target.chmod(0o644)
    with open(target, "ab") as f:
        f.write(b"\0" * 16)
    run = ptdebug("decode", str(stored), "--format", "ips", check=False)
    assert run.returncode == 2 and "changed since the capture" in run.stderr, run.stderr
    # so is packing it
    run = ptdebug("captures", "--dir", str(directory), "pack", "capture", "-o",
                  str(tmp_path / "packed"), check=False)
    assert run.returncode == 2 and "changed since the capture" in run.stderr


@pytest.mark.parametrize("file", ["../.store/images/../../../etc/passwd",
                                  "../.store/images/passwd", "../.store/../x/bid-00-1",
                                  "../.store/images/sha256-" + "a" * 63])
def test_nothing_but_a_store_key_may_leave_the_bundle(captures, file):
    bundle = captures / "capture-1"
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["images"][0]["file"] = file
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    run = ptdebug("decode", str(bundle), "--format", "ips", check=False)
    assert run.returncode == 2 and "outside the bundle" in run.stderr, run.stderr


def test_a_store_that_is_a_link_is_refused(captures, tmp_path):
    real = tmp_path / "elsewhere-store"
    shutil.move(captures / ".store", real)
    (captures / ".store").symlink_to(real)
    run = ptdebug("decode", str(captures / "capture-1"), "--format", "ips", check=False)
    assert run.returncode == 2 and "is not a directory" in run.stderr, run.stderr
