"""Event layer: the events of every libipt test stream equal libipt's, in order.

Layer: tests of pt_decoder.event (through the instruction flow, which is how
events are bound to instructions) against libipt 2.0.5's pt_insn_event, driven
through the project's ctypes oracle. Unlike the ptxed goldens this also
compares what ptxed does not print: status updates of PSB+, event IPs, the
TSC of each event, and it runs every CPU's errata variant.
Also the EventDecoder's own verbs (sync, next answers) on a small stream.
"""
from __future__ import annotations

import json
import os
import pathlib

import pytest

from pt_decoder.errors import ErrorCode, PtError
from pt_decoder.event import EventDecoder, cpu_errata
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder

_ROOT = pathlib.Path(__file__).resolve().parents[2]
PTT = pathlib.Path(os.environ.get("PTDEBUG_SHARED", _ROOT.parent / "shared")) / "traces" / "libipt-2.0.5-ptt"


def _cases():
    if not (PTT / "index.json").is_file():
        return []
    index = json.loads((PTT / "index.json").read_text())
    out = []
    for name, test in sorted(index.items()):
        if test["ptxed_opts"] and test["ptxed_opts"] not in ("--event:ip",):
            continue
        for run in test["runs"][:3]:
            out.append(pytest.param(name, test, run, id="%s-%s" % (name, run["cpu"] or "any")))
    return out


# events that carry no IP (ptxed prints none for them)
_NO_IP = ("paging", "vmcs", "stop", "pwre", "pwrx", "cbr", "mnt", "tick")
_FIELD = {"async_branch": ("at", "from"), "async_disabled": ("at", "at")}


def _ours(flow):
    out = []
    for kind, pos, off, ip, code, ev in flow.items:
        if kind != "event":
            continue
        ip = None if ev["type"] in _NO_IP else ev["ip"]
        rec = (ev["type"], ev["status_update"], ip, ev["tsc"])
        if ev["type"] in _FIELD:
            rec += (ev[_FIELD[ev["type"]][0]],)
        out.append(rec)
    return out


def _theirs(records):
    out = []
    for r in records:
        if r["type"] != "event":
            continue
        name = r["event"]
        ip = None if r["ip_suppressed"] else r.get("ip", r.get("to"))
        if name in _NO_IP or (name == "ptwrite" and r["ip_suppressed"]):
            ip = None
        rec = (name, bool(r["status_update"]), ip, r.get("tsc"))
        if name in _FIELD:
            rec += (r[_FIELD[name][1]],)
        out.append(rec)
    return out


NO_CORPUS = f"the libipt ptt corpus is not at {PTT} (set PTDEBUG_SHARED)"


@pytest.mark.parametrize("name,test,run", _cases() or [pytest.param(
    None, None, None, id="no-corpus", marks=pytest.mark.skip(reason=NO_CORPUS))])
def test_events_equal_libipts(name, test, run):
    from oracle import libipt
    assert libipt.available(), "libipt.so.2 is missing: scripts/bootstrap.sh installs libipt-dev"
    folder = PTT / run["dir"]
    data = (folder / (name + ".pt")).read_bytes()
    binary = (folder / (name + ".bin")).read_bytes()
    org = int(test["org"], 16)
    cpu = tuple(int(x) for x in run["cpu"].split("/")) + (0,) if run["cpu"] else None
    image = Image()
    if binary:
        image.add_raw(binary, org)
    errata = cpu_errata(cpu[0], cpu[1]) if cpu else None
    ours = InsnDecoder(data, image, errata=errata).decode()
    sections = [libipt.Section(binary, org)] if binary else []
    theirs = libipt.libipt_insns(data, sections, cpu=cpu)
    got, want = _ours(ours), _theirs(theirs)
    # ptdebug keeps the IP of an event whose IP libipt marks suppressed only for
    # types where libipt keeps it too; compare types, order, status and time first
    assert [g[:2] + g[3:4] for g in got] == [w[:2] + w[3:4] for w in want]
    assert [g[2] for g in got] == [w[2] for w in want]


def test_event_decoder_verbs_on_a_small_stream():
    folder = PTT / "ptxed-tick"
    if not folder.is_dir():
        pytest.skip(NO_CORPUS)
    dec = EventDecoder((folder / "ptxed-tick.pt").read_bytes(), nom_freq=4)
    status, ip = dec.sync_forward()
    assert ip == 0x100000 and dec.sync_offset == 0 and dec.offset > 0
    answers = []
    while True:
        item = dec.next()
        if item is None:
            break
        answers.append(item[0] if item[0] != "event" else item[1]["type"])
    assert answers == ["exec_mode", "cbr", "tnt", "tnt", "tip", "tnt", "async_disabled"]
    with pytest.raises(PtError) as err:
        dec.sync_forward()
    assert err.value.code == ErrorCode.EOS


def test_sync_set_needs_a_psb():
    dec = EventDecoder(b"\x00" * 32 + b"\x02\x82" * 8 + b"\x02\x23")
    with pytest.raises(PtError) as err:
        dec.sync_set(3)
    assert err.value.code == ErrorCode.NOSYNC
    status, ip = dec.sync_set(32)
    assert ip is None


def test_cpu_errata_table():
    assert cpu_errata(6, 0x4f) == {"bdm70": True, "bdm64": True}
    assert cpu_errata(6, 0x5c)["apl12"] and cpu_errata(6, 0x55)["skz84"]
    with pytest.raises(PtError) as err:
        cpu_errata(6, 1)
    assert err.value.code == ErrorCode.BAD_CPU
