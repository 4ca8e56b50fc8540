"""What CPU this is and what trace hardware the kernel exposes for it.

Layer: adapter.hw (mechanism only: reads /proc and /sys, decides nothing).
Vendor, family, model and stepping come from /proc/cpuinfo, which the
kernel fills from CPUID leaf 1 (SDM Vol. 2A, CPUID: "display family" and
"display model" already combine the extended fields); the `hypervisor` flag
there is CPUID.1:ECX[31], which hypervisors set (SDM Vol. 2A Table 3-10
says the bit is reserved on bare metal and always 0). The Intel PT PMU's
capabilities and config-bit layout are what the intel_pt driver publishes
under /sys/bus/event_source/devices/intel_pt/{caps,format}/ (Linux
Documentation/ABI/testing/sysfs-bus-event_source-devices-format).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib

PMU_ROOT = pathlib.Path("/sys/bus/event_source/devices")


@dataclasses.dataclass(frozen=True)
class CpuId:
    vendor: str
    family: int
    model: int
    stepping: int
    model_name: str
    flags: frozenset

    def as_manifest(self) -> dict:
        return {"vendor": self.vendor, "family": self.family, "model": self.model,
                "stepping": self.stepping, "model_name": self.model_name}


def cpu_id(cpuinfo: str | None = None) -> CpuId:
    """The first processor of /proc/cpuinfo (or of the text given)."""
    if cpuinfo is None:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return CpuId(vendor=fields.get("vendor_id", "unknown"),
                 family=int(fields.get("cpu family", "0") or 0),
                 model=int(fields.get("model", "0") or 0),
                 stepping=int(fields.get("stepping", "0") or 0),
                 model_name=fields.get("model name", ""),
                 flags=frozenset(fields.get("flags", "").split()))


def virtualization() -> dict:
    """Whether we run in a virtual machine, and the evidence for it."""
    evidence = []
    try:
        if "hypervisor" in cpu_id().flags:
            evidence.append("CPUID.1:ECX[31] (the hypervisor bit) is set")
    except OSError:
        pass
    hyp = pathlib.Path("/sys/hypervisor/type")
    if hyp.exists():
        evidence.append(f"/sys/hypervisor/type says {hyp.read_text().strip()!r}")
    for name in ("sys_vendor", "product_name"):
        p = pathlib.Path("/sys/class/dmi/id") / name
        try:
            text = p.read_text().strip()
        except OSError:
            continue
        if any(v in text for v in ("QEMU", "KVM", "VMware", "VirtualBox", "Xen",
                                   "Amazon EC2", "Google Compute", "Microsoft Corporation",
                                   "Firecracker")):
            evidence.append(f"DMI {name} is {text!r}")
    return {"vm": bool(evidence), "evidence": evidence}


def pmu_type(name: str, root: pathlib.Path = PMU_ROOT) -> int | None:
    """perf_event_attr.type of a dynamic PMU (intel_pt, breakpoint...), or None if absent."""
    try:
        return int((root / name / "type").read_text())
    except (OSError, ValueError):
        return None


def pmu_caps(name: str, root: pathlib.Path = PMU_ROOT) -> dict[str, int]:
    """The PMU's caps/ directory: capability name -> value (hex or decimal text)."""
    caps = {}
    d = root / name / "caps"
    if not d.is_dir():
        return caps
    for entry in sorted(d.iterdir()):
        try:
            text = entry.read_text().strip()
        except OSError:
            continue
        try:
            caps[entry.name] = int(text, 16)  # the driver prints them with "%x"
        except ValueError:
            continue
    return caps


def pmu_formats(name: str, root: pathlib.Path = PMU_ROOT) -> dict[str, str]:
    """The PMU's format/ directory: term -> "config:LO[-HI]" string."""
    formats = {}
    d = root / name / "format"
    if not d.is_dir():
        return formats
    for entry in sorted(d.iterdir()):
        try:
            formats[entry.name] = entry.read_text().strip()
        except OSError:
            continue
    return formats


def kernel_release() -> str:
    return os.uname().release


def kernel_version() -> tuple[int, int]:
    """(major, minor) of the running kernel."""
    parts = kernel_release().split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)
