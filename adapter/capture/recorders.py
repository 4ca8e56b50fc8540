"""The recorder seam: which recorder records a target, chosen once, with the reason.

Layer: adapter.capture (policy). Three recorders write the same trace bundle (real Intel PT
packets, the same manifest), so nothing above this choice asks which one ran:
  intel_pt  the CPU's Intel Processor Trace through perf (capture/intel_pt.py): a few percent
            slower than native; only where the `intel_pt` PMU is exposed;
  dbi       Frida's Stalker with an inline ring (capture/dbi.py): some 10-40x slower than
            native, anywhere Frida can attach to the target;
  stepper   ptrace (capture/stepper.py): 10^4-10^5 instructions a second, anywhere ptrace
            works, Go programs and traced processes included.
`choose()` takes the fastest the machine and the target allow (in that order) unless one is
forced (`--recorder` on the command line), and says why; DBI only when asked for, for now
(DBI_BY_DEFAULT says why). What DBI cannot follow, found before anything touches the target: a Go program (Frida's
Stalker crashes in Go's runtime and never returns from following a cgo thread), a process
another tracer holds (Frida injects with ptrace), a Frida build other than the pinned one (the
AVX-512 repair depends on its bytes). What is found only at attach (the repair's bytes do not
match) raises dbi.DbiUnavailable, and the caller records with the stepper, saying so.
"""
from __future__ import annotations

import dataclasses
import os

from adapter.hw import procfs

NAMES = ("intel_pt", "dbi", "stepper")
CHOICES = ("auto", *NAMES)

DBI_BY_DEFAULT = False
"""Whether `auto` may pick DBI. Not yet. Frida's injection runs its bootstrap on the process's
main thread and restores only its general registers: a main thread interrupted in its own
computation came back with xmm0-7's low halves and zmm16 changed (numpy gave a wrong result
after it in about half the attaches). DbiSession now attaches only while the main thread waits
in a system call (dbi.main_thread_at_rest), and 240 windows since showed no damage; DBI also
does not yet record Python frames, and the record breakpoints of a debug session use it only
when asked for (adapter/features/window_recorder.py says why). When those are done, and the whole suite has run with DBI chosen, this becomes True."""
DBI_CAVEAT = ("DBI is new: it attaches only while the program's main thread waits in a system "
              "call (Frida's injection changes that thread's vector registers otherwise; "
              "docs/recording.md)")


@dataclasses.dataclass(frozen=True)
class Choice:
    name: str                    # one of NAMES, or None when nothing can record
    why: str                     # in words, for the user (doctor, the capture event, --json)

    def as_dict(self) -> dict:
        return {"name": self.name, "why": self.why}


def go_program(path: str) -> bool:
    """Whether the ELF file at `path` is a Go program (its build info or pclntab section)."""
    try:
        from elftools.elf.elffile import ELFFile
        with open(path, "rb") as f:
            elf = ELFFile(f)
            return any(elf.get_section_by_name(name) is not None
                       for name in (".go.buildinfo", ".gopclntab"))
    except Exception:  # noqa: BLE001 - not an ELF file, unreadable: not a Go program we know of
        return False


def _tracer(pid: int) -> int:
    """The pid of a tracer holding any thread of process `pid` (0: none)."""
    try:
        tids = procfs.tasks(pid)
    except OSError:
        return 0
    for tid in tids:
        try:
            tracer = procfs.status(pid, tid).tracer_pid
        except OSError:
            continue
        if tracer:
            return tracer
    return 0


def dbi_refusal(*, pid: int | None = None, program: str | None = None) -> str | None:
    """Why DBI cannot record this target (a running `pid` or a `program` to launch), or None."""
    from adapter.capture import dbi
    try:
        dbi.frida_module()
    except dbi.DbiUnavailable as exc:
        return str(exc)
    exe = program
    if pid is not None:
        exe = f"/proc/{pid}/exe"
        tracer = _tracer(pid)
        if tracer:
            return (f"process {pid} is traced by process {tracer} (another debugger): Frida "
                    "injects itself with ptrace, which only one tracer may use")
    if exe is not None and go_program(exe):
        return ("it is a Go program: Frida's Stalker cannot follow Go's runtime (a static Go "
                "binary crashes Frida's loader; following a cgo thread never returns)")
    return None


def choose(requested: str = "auto", *, pid: int | None = None, program: str | None = None,
           intel_pt_usable: bool | None = None, forced_by: str = "--recorder") -> Choice:
    """The recorder for this target: `requested` when it is not "auto" (the caller said so),
    else Intel PT where usable, else DBI where dbi_refusal() finds nothing, else the stepper.
    `intel_pt_usable`: the doctor's verdict when the caller has it (probed otherwise)."""
    if requested not in CHOICES:
        raise ValueError(f"recorder must be one of {', '.join(CHOICES)}, not {requested!r}")
    if requested != "auto":
        return Choice(requested, f"{forced_by} {requested}")
    if intel_pt_usable is None:
        intel_pt_usable = _intel_pt_usable()
    if intel_pt_usable:
        return Choice("intel_pt", "the intel_pt PMU is present and usable")
    if not DBI_BY_DEFAULT:
        return Choice("stepper", "no usable Intel PT here; the ptrace stepper records (DBI, "
                                 "1000x faster, is used only when asked for: --recorder dbi)")
    refusal = dbi_refusal(pid=pid, program=program)
    if refusal is None:
        return Choice("dbi", "no usable Intel PT here; Frida's Stalker records instead "
                             "(dynamic instrumentation, exact, some 10-40x slower than native)")
    return Choice("stepper", f"no usable Intel PT here, and DBI cannot record this target: "
                             f"{refusal}; the ptrace stepper records instead")


def _intel_pt_usable() -> bool:
    from adapter.hw import cpu as cpu_mod
    if cpu_mod.pmu_type("intel_pt", cpu_mod.PMU_ROOT) is None:
        return False
    paranoid = None
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            paranoid = int(f.read())
    except (OSError, ValueError):
        pass
    return paranoid is None or paranoid <= 1 or os.geteuid() == 0
