"""`ptdebug doctor [--json]`: what this machine can record and watch, and for
every "no", why and how to fix it; and which external tools each feature
needs (Go, Delve, perf, libipt, a C compiler), found or not, with how to
get each one that is missing.

Layer: adapter.commands, over adapter.hw and adapter.capture.recorders (probes only; it opens and
closes perf events on its own process, reads /proc and /sys and asks tools for their version;
the one process it touches is its own short-lived child (a sleeping Python), to which it attaches the
DBI recorder and detaches again, to say whether dynamic instrumentation works here). The
`record --recorder auto` choice reads `recorder_backend()` from here. Exit status 0: the report is the result,
whatever it says.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import json
import os
import shutil
import subprocess

from adapter.hw import cpu as cpu_mod
from adapter.hw import perf, procfs

CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_PERFMON = 21, 19, 38  # linux/capability.h


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def probe_breakpoints() -> dict:
    """Open up to 5 execute breakpoints on this process (a dummy address that
    never runs): how many the hardware gives (x86 has 4 address registers,
    SDM Vol. 3B §17.2), and the errno that stopped the count."""
    target = ctypes.c_char(0)
    attr = perf.PerfEventAttr()
    attr.type = perf.PERF_TYPE_BREAKPOINT
    attr.size = perf.PERF_ATTR_SIZE_VER1  # the head a breakpoint needs
    attr.bp_type = perf.HW_BREAKPOINT_X
    attr.bp_addr = ctypes.addressof(target)
    attr.bp_len = ctypes.sizeof(ctypes.c_long)
    attr.sample_period = 1
    attr.flags = perf.FLAG_DISABLED | perf.FLAG_EXCLUDE_KERNEL | perf.FLAG_EXCLUDE_HV
    fds, err = [], 0
    try:
        for _ in range(5):
            try:
                fds.append(perf.perf_event_open(attr, 0, flags=0))
            except OSError as exc:
                err = exc.errno
                break
    finally:
        for fd in fds:
            os.close(fd)
    return {"count": len(fds), "errno": err, "error": os.strerror(err) if err else None}


def capabilities() -> dict:
    eff = procfs.parse_status(_read("/proc/self/status") or "").mask("CapEff")
    return {"CAP_PERFMON": bool(eff >> CAP_PERFMON & 1),
            "CAP_SYS_PTRACE": bool(eff >> CAP_SYS_PTRACE & 1),
            "CAP_SYS_ADMIN": bool(eff >> CAP_SYS_ADMIN & 1), "uid": os.geteuid()}


def probe_dbi() -> dict:
    """Whether the DBI recorder works here: Frida at the pinned version attaches to a child of
    ours, the AVX-512 repair applies where it is needed, and it detaches leaving nothing."""
    from adapter.capture import dbi, dbi_repair
    info = {"frida": dbi.FRIDA_VERSION, "avx512": dbi_repair.cpu_has_avx512()}
    try:
        dbi.frida_module()
    except dbi.DbiUnavailable as exc:
        return {**info, "usable": False, "why_not": [str(exc)],
                "fix": f"pip install frida=={dbi.FRIDA_VERSION} (scripts/bootstrap.sh does)"}
    import sys
    # the probe's child is this interpreter (always there, whatever PATH holds), asleep
    child = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(30)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        session = dbi.DbiSession(child.pid)
        info["repair"] = session.repair
        session.close()
        if session.left_behind:
            return {**info, "usable": False,
                    "why_not": [f"Frida left {session.left_behind} in the probe process"]}
        return {**info, "usable": True}
    except dbi.DbiUnavailable as exc:
        return {**info, "usable": False, "why_not": [str(exc)],
                "fix": "record with --recorder stepper (ptrace) instead"}
    finally:
        child.kill()
        child.wait()


def check(root=cpu_mod.PMU_ROOT, probe_dbi: bool = True) -> dict:
    """Every fact and verdict `doctor` prints, as a dict (the --json output). probe_dbi False
    leaves out the DBI probe (it attaches to a child: half a second)."""
    ident = cpu_mod.cpu_id()
    vm = cpu_mod.virtualization()
    caps = capabilities()
    paranoid = _read("/proc/sys/kernel/perf_event_paranoid")
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    privileged = caps["CAP_PERFMON"] or caps["CAP_SYS_ADMIN"]
    report: dict = {
        "kernel": cpu_mod.kernel_release(),
        "cpu": ident.as_manifest(),
        "virtual_machine": vm,
        "perf_event_paranoid": None if paranoid is None else int(paranoid),
        "ptrace_scope": None if scope is None else int(scope),
        "capabilities": caps,
    }
    # -- Intel PT --------------------------------------------------------------------
    pt_type = cpu_mod.pmu_type("intel_pt", root)
    intel_pt = {"available": pt_type is not None, "type": pt_type,
                "caps": cpu_mod.pmu_caps("intel_pt", root),
                "format": cpu_mod.pmu_formats("intel_pt", root)}
    if pt_type is None:
        why = [f"{root}/intel_pt does not exist: the kernel exposes no Intel PT PMU"]
        if ident.vendor != "GenuineIntel":
            why.append(f"this CPU is {ident.vendor} ({ident.model_name}); Intel Processor "
                       "Trace exists only on Intel CPUs (Broadwell and later)")
        elif vm["vm"]:
            why.append("this is a virtual machine and the hypervisor does not pass Intel PT "
                       "through (KVM needs pt_mode=1 in kvm_intel on the host; most clouds "
                       "offer it on no instance type)")
        else:
            why.append("the intel_pt driver is not loaded or the CPU predates Intel PT "
                       "(check `grep -o intel_pt /proc/cpuinfo`)")
        intel_pt["why_not"] = why
        intel_pt["fix"] = ("run on a bare-metal Intel host (or a VM with PT passed through); "
                           "here ptdebug records with DBI (Frida) or the ptrace stepper instead")
    else:
        kv = cpu_mod.kernel_version()
        intel_pt["aux_pause_resume"] = kv >= (6, 13)
        if paranoid is not None and int(paranoid) > 1 and not privileged:
            intel_pt["usable"] = False
            intel_pt["why_not"] = [f"perf_event_paranoid is {paranoid} and this process has "
                                   "neither CAP_PERFMON nor CAP_SYS_ADMIN"]
            intel_pt["fix"] = ("sudo sysctl kernel.perf_event_paranoid=1, or "
                               "sudo setcap cap_perfmon+ep on the Python interpreter")
        else:
            intel_pt["usable"] = True
    report["intel_pt"] = intel_pt
    # -- hardware breakpoints --------------------------------------------------------
    bp_type = cpu_mod.pmu_type("breakpoint", root)
    bp = {"available": bp_type is not None, "type": bp_type}
    if bp_type is not None:
        probe = probe_breakpoints()
        bp["debug_registers"] = probe["count"]
        bp["probe"] = probe
        if probe["count"] == 0:
            bp["why_not"] = [f"perf_event_open(PERF_TYPE_BREAKPOINT) failed: {probe['error']}"]
            bp["fix"] = ("lower kernel.perf_event_paranoid to 2 or less (it allows "
                         "user-space breakpoints on own processes) or grant CAP_PERFMON")
            if probe["errno"] == errno.ENODEV:
                bp["why_not"].append("the hypervisor does not virtualise debug registers")
    else:
        bp["why_not"] = ["the kernel has no breakpoint PMU (CONFIG_HAVE_HW_BREAKPOINT off)"]
        bp["fix"] = "use a kernel built with hardware breakpoint support"
    report["breakpoints"] = bp
    # -- ptrace ----------------------------------------------------------------------
    ptrace = {"usable": True}
    if scope is not None and int(scope) >= 3:
        ptrace = {"usable": False, "why_not": ["kernel.yama.ptrace_scope is 3: no ptrace at all"],
                  "fix": "reboot with kernel.yama.ptrace_scope <= 2"}
    elif scope is not None and int(scope) >= 1 and not caps["CAP_SYS_PTRACE"]:
        ptrace["limits"] = (f"ptrace_scope is {scope}: ptdebug can record programs it "
                            "launches; to attach to a running PID, run as root, grant "
                            "CAP_SYS_PTRACE, or sudo sysctl kernel.yama.ptrace_scope=0")
    report["ptrace"] = ptrace
    if probe_dbi:
        report["dbi"] = globals()["probe_dbi"]()
    report["recorder"] = recorder_backend(report)
    report["tools"] = external_tools()
    return report


# name -> (what needs it, how to get it). Debian package names: scripts/bootstrap.sh's.
TOOLS = {
    "go": ("Go targets: ptdebug builds them (go build / go test -c)",
           "install Go (https://go.dev/dl/, or apt-get install golang-go)"),
    "dlv": ("Go debugging: Delve is the debugger behind a Go session",
            "go install github.com/go-delve/delve/cmd/dlv@latest (or set PTDEBUG_DLV)"),
    "perf": ("recording Intel PT outside ptdebug for `ptdebug import` (perf record -e intel_pt//u)",
             "apt-get install linux-perf"),
    "cc": ("`ptdebug demo` (compiles its native helper) and the C test fixtures",
           "apt-get install build-essential"),
    "libipt": ("the reference decoder of the tests and `ptdebug bench` (libipt.so.2)",
               "apt-get install libipt-dev"),
}


def _version(argv: list[str], prefix: str = "") -> str | None:
    """The first line starting with `prefix` that a tool prints (its version), or None if it
    cannot say."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (done.stdout or done.stderr).splitlines()]
    found = [line for line in lines if line and line.startswith(prefix)]
    return found[0] if done.returncode == 0 and found else None


def _find_go() -> str | None:
    return shutil.which("go") or ("/usr/local/go/bin/go"
                                  if os.access("/usr/local/go/bin/go", os.X_OK) else None)


def _find_dlv(go: str | None) -> str | None:
    """Where a Go session looks for Delve, in the same order (adapter/backends/delve_process.py
    find_dlv): $PTDEBUG_DLV, $(go env GOPATH)/bin, ~/go/bin, PATH."""
    explicit = os.environ.get("PTDEBUG_DLV")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    candidates = []
    gopath = _version([go, "env", "GOPATH"]) if go else None
    for entry in filter(None, (gopath or "").split(os.pathsep)):
        candidates.append(os.path.join(entry, "bin", "dlv"))
    candidates.append(os.path.expanduser("~/go/bin/dlv"))
    found = next((c for c in candidates if os.access(c, os.X_OK)), None)
    return found or shutil.which("dlv")


def external_tools() -> dict:
    """{tool: {found, path, version, needed_for, fix (only when missing)}} for every external
    tool a feature of ptdebug runs."""
    go = _find_go()
    paths = {"go": go, "dlv": _find_dlv(go),
             "perf": shutil.which("perf"), "cc": shutil.which("gcc") or shutil.which("cc"),
             "libipt": ctypes.util.find_library("ipt")}
    versions = {"go": [paths["go"], "version"], "dlv": [paths["dlv"], "version"],
                "perf": [paths["perf"], "--version"],
                "cc": [paths["cc"], "--version"]}
    report = {}
    for name, (needed_for, fix) in TOOLS.items():
        path = paths[name]
        entry = {"found": path is not None, "path": path, "version": None,
                 "needed_for": needed_for}
        if path is not None and name in versions:
            # `dlv version` prints "Delve Debugger" first, then "Version: 1.x"
            entry["version"] = _version(versions[name], "Version:" if name == "dlv" else "")
        if path is None:
            entry["fix"] = fix
        report[name] = entry
    return report


def recorder_backend(report: dict | None = None) -> dict:
    """Which recorder `record --recorder auto` uses for a program that DBI can follow (not a
    Go program, not traced), and why (adapter/capture/recorders.py chooses per target)."""
    from adapter.capture import recorders
    report = report or check()
    ipt = report["intel_pt"]
    if ipt["available"] and ipt.get("usable"):
        return {"backend": "intel_pt", "why": "the intel_pt PMU is present and usable"}
    dbi = report.get("dbi")
    if dbi is not None and dbi["usable"]:
        choice = recorders.choose("auto", intel_pt_usable=False)
        if choice.name == "dbi":
            return {"backend": "dbi", "why": choice.why + "; Go programs and traced processes "
                                                          "get the ptrace stepper"}
    if report["ptrace"]["usable"]:
        why = "no usable Intel PT here; the ptrace stepper records instead"
        if dbi is not None and dbi["usable"] and not recorders.DBI_BY_DEFAULT:
            why += " (DBI works here, used when asked for: --recorder dbi)"
        if dbi is not None and not dbi["usable"]:
            why = f"no usable Intel PT, and DBI does not work here ({dbi['why_not'][0]}); " \
                  "the ptrace stepper records instead"
        if report["breakpoints"].get("debug_registers", 0) == 0:
            why += " (without debug registers it cannot run: see breakpoints)"
            return {"backend": None, "why": why}
        return {"backend": "stepper", "why": why}
    return {"backend": None, "why": "neither Intel PT nor ptrace is usable here"}


def _yes(flag) -> str:
    return "yes" if flag else "no"


def format_report(r: dict) -> str:
    c = r["cpu"]
    lines = [f"kernel            {r['kernel']}",
             f"cpu               {c['vendor']} family {c['family']} model {c['model']} "
             f"stepping {c['stepping']} ({c['model_name']})",
             f"virtual machine   {_yes(r['virtual_machine']['vm'])}"
             + (f" ({'; '.join(r['virtual_machine']['evidence'])})"
                if r['virtual_machine']['evidence'] else ""),
             f"perf_event_paranoid {r['perf_event_paranoid']}",
             f"ptrace_scope      {r['ptrace_scope'] if r['ptrace_scope'] is not None else 'n/a (no Yama)'}",
             "capabilities      " + ", ".join(f"{k} {_yes(v)}" for k, v in
                                             r["capabilities"].items() if k != "uid")
             + f" (uid {r['capabilities']['uid']})"]
    ipt = r["intel_pt"]
    if ipt["available"] and ipt.get("usable"):
        caps = ", ".join(f"{k}={v}" for k, v in ipt["caps"].items())
        lines.append(f"intel_pt          yes (type {ipt['type']}; caps: {caps})")
        lines.append(f"  aux pause/resume {_yes(ipt.get('aux_pause_resume'))} (Linux 6.13+)")
    else:
        lines.append("intel_pt          no")
    for why in ipt.get("why_not", []):
        lines.append(f"  why: {why}")
    if "fix" in ipt:
        lines.append(f"  fix: {ipt['fix']}")
    bp = r["breakpoints"]
    if bp.get("debug_registers"):
        lines.append(f"hw breakpoints    yes ({bp['debug_registers']} debug registers; "
                     f"a fifth gives {bp['probe']['error'] or 'no error'})")
    else:
        lines.append("hw breakpoints    no")
        for why in bp.get("why_not", []):
            lines.append(f"  why: {why}")
        if "fix" in bp:
            lines.append(f"  fix: {bp['fix']}")
    p = r["ptrace"]
    lines.append(f"ptrace            {_yes(p['usable'])}")
    for why in p.get("why_not", []):
        lines.append(f"  why: {why}")
    if "limits" in p:
        lines.append(f"  note: {p['limits']}")
    if "fix" in p:
        lines.append(f"  fix: {p['fix']}")
    d = r.get("dbi")
    if d is not None:
        lines.append(f"dbi               {_yes(d['usable'])} (Frida {d['frida']}; AVX-512 "
                     f"{_yes(d['avx512'])}{'; ' + d['repair'] if d.get('repair') else ''})")
        for why in d.get("why_not", []):
            lines.append(f"  why: {why}")
        if "fix" in d:
            lines.append(f"  fix: {d['fix']}")
    rec = r["recorder"]
    lines.append(f"recorder          {rec['backend'] or 'none'}: {rec['why']}")
    lines.append("tools")
    for name, tool in r.get("tools", {}).items():
        if tool["found"]:
            lines.append(f"  {name:<8} yes ({tool['version'] or tool['path']})")
        else:
            lines.append(f"  {name:<8} no: needed for {tool['needed_for']}")
            lines.append(f"           fix: {tool['fix']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ptdebug doctor",
                                     description="What this machine can record and watch.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = check()
    print(json.dumps(report, indent=1) if args.json else format_report(report))
    return 0
