"""Static knowledge of the traced code: which instruction ends a block, where a
direct branch goes, what a branch does given the registers, and how the stack
pointer moves along a straight path.

Layer: adapter.capture (the stepper's analysis half). It reads code bytes
through a callable and registers as a plain mapping; it knows nothing of
ptrace, processes or PT packets. The stepper asks `Walker.walk()` for the
path it can predict from a known state and stops the target only where that
path ends; at the stop, `Emulator` computes where the stopping instruction
goes from the real registers (SDM Vol. 1 §6.3 and Vol. 2 Jcc/JMP/CALL/RET/LOOP:
a near branch changes only RIP, RSP and the stack slot it pushes or pops, so
the stepper can perform it instead of single-stepping it).

Decoded instructions are cached per address for the whole recording: code
that rewrites itself while it is recorded is not supported (JIT compilers
write new code to new addresses, which is fine).
"""
from __future__ import annotations

import enum

import capstone
from capstone import x86

_MD = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_MD.detail = True
# Most instructions need no operand details (copying them out of capstone costs
# ~50 us each in Python): a first pass without details picks the ones that do.
_MD_LITE = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
_FLOW_MNEMONICS = frozenset({
    "jmp", "call", "ret", "retf", "retfq", "iret", "iretd", "iretq", "syscall", "sysenter",
    "sysexit", "sysret", "int", "int1", "int3", "into", "ud0", "ud1", "ud2", "hlt", "ljmp",
    "lcall", "xbegin", "xabort", "xend", "jrcxz", "jecxz", "loop", "loope", "loopne",
    "push", "pop", "leave", "enter", "pushfq", "popfq", "pushf", "popf", "xchg", "xadd",
    "cmpxchg", "vmcall", "vmmcall", "vmlaunch", "vmresume"})
_STACK_REGS = frozenset({"rsp", "esp", "sp", "spl", "rbp", "ebp", "bp", "bpl"})

MASK64 = 0xFFFFFFFFFFFFFFFF


class Kind(enum.IntEnum):
    """What an instruction does to the flow, as the walker sees it."""
    PLAIN = 0          # falls through to the next instruction
    JMP = 1            # direct unconditional jump: the walk follows it
    CALL = 2           # direct call: the walk follows it and pushes the return
    JCC = 3            # conditional branch: its outcome is in RFLAGS at the branch
    LOOP = 4           # JRCXZ/JECXZ/LOOP/LOOPE/LOOPNE: outcome from RCX (and ZF)
    JMP_INDIRECT = 5   # target in a register or memory
    CALL_INDIRECT = 6
    RET = 7
    SYSCALL = 8        # a system call: the stepper looks at RAX before letting it run
    OTHER = 9          # far transfers, int, ud2, hlt... : single-stepped
    UNDECODABLE = 10   # bytes that do not decode (or cannot be read): single-stepped


STOP_KINDS = frozenset({Kind.JCC, Kind.LOOP, Kind.JMP_INDIRECT, Kind.CALL_INDIRECT,
                        Kind.RET, Kind.SYSCALL, Kind.OTHER, Kind.UNDECODABLE})

# Stack-pointer effects the walker can follow without registers (see _stack_effect).
_SE_NONE, _SE_DELTA, _SE_RBP_FROM_RSP, _SE_RSP_FROM_RBP, _SE_LEAVE, _SE_AND, \
    _SE_LOSE_RSP, _SE_LOSE_RBP = range(8)

_LEGACY_PREFIXES = frozenset({0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3})


class Insn:
    """One decoded instruction: address, length, flow kind, direct target and
    (for the stepper's emulation) the capstone instruction."""
    __slots__ = ("addr", "cond", "cs", "kind", "rep", "size", "stack", "target", "text")

    def __init__(self, addr, size, kind, target=None, cs=None, cond=None, stack=(0, 0),
                 rep=False, text=""):
        self.addr = addr
        self.size = size
        self.kind = kind
        self.target = target
        self.cs = cs
        self.cond = cond      # tttn condition code of a Jcc (SDM Vol. 2 Appendix B.1.4.7)
        self.stack = stack    # (effect, value) on RSP/RBP, see _stack_effect
        self.rep = rep        # REP-prefixed string instruction (one PT instruction, many steps)
        self.text = text

    @property
    def next(self) -> int:
        return self.addr + self.size

    def __repr__(self) -> str:
        return f"Insn({self.addr:#x} {self.text} {self.kind.name})"


def _classify(ins) -> tuple[Kind, int | None]:
    iid = ins.id
    groups = set(ins.groups)
    ops = ins.operands
    if iid in (x86.X86_INS_JMP, x86.X86_INS_CALL):
        direct = len(ops) == 1 and ops[0].type == x86.X86_OP_IMM
        if iid == x86.X86_INS_JMP:
            return (Kind.JMP, ops[0].imm & MASK64) if direct else (Kind.JMP_INDIRECT, None)
        return (Kind.CALL, ops[0].imm & MASK64) if direct else (Kind.CALL_INDIRECT, None)
    if iid == x86.X86_INS_RET:
        return Kind.RET, None
    if iid in (x86.X86_INS_JRCXZ, x86.X86_INS_JECXZ, x86.X86_INS_LOOP, x86.X86_INS_LOOPE,
               x86.X86_INS_LOOPNE):
        return Kind.LOOP, ops[0].imm & MASK64
    if capstone.CS_GRP_JUMP in groups:  # the remaining jumps are the Jcc family
        return Kind.JCC, ops[0].imm & MASK64
    if iid == x86.X86_INS_SYSCALL:
        return Kind.SYSCALL, None
    if groups & {capstone.CS_GRP_INT, capstone.CS_GRP_IRET, capstone.CS_GRP_CALL,
                 capstone.CS_GRP_RET} or iid in (
            x86.X86_INS_UD0, x86.X86_INS_UD1, x86.X86_INS_UD2, x86.X86_INS_HLT, x86.X86_INS_LJMP, x86.X86_INS_SYSENTER,
            x86.X86_INS_XBEGIN, x86.X86_INS_XABORT, x86.X86_INS_XEND, x86.X86_INS_INT3):
        return Kind.OTHER, None
    return Kind.PLAIN, None


def _condition_code(code: bytes) -> int:
    i = 0
    while code[i] in _LEGACY_PREFIXES or 0x40 <= code[i] <= 0x4F:
        i += 1
    if code[i] == 0x0F:
        return code[i + 1] & 0xF
    return code[i] & 0xF


def _stack_effect(ins, kind: Kind) -> tuple[int, int]:
    """How the instruction moves RSP (and RBP, which frames restore RSP from).
    Only the forms compilers use in prologues and epilogues are followed; any
    other write makes the walker forget the register (never guess)."""
    iid = ins.id
    if kind == Kind.CALL:
        return _SE_DELTA, -8
    if iid == x86.X86_INS_PUSH:
        return _SE_DELTA, -8
    if iid == x86.X86_INS_POP:
        op = ins.operands[0]
        if op.type == x86.X86_OP_REG and op.reg == x86.X86_REG_RSP:
            return _SE_LOSE_RSP, 0
        if op.type == x86.X86_OP_REG and op.reg == x86.X86_REG_RBP:
            return _SE_LOSE_RBP, 8   # rbp unknown afterwards, rsp += 8
        return _SE_DELTA, 8
    if iid == x86.X86_INS_LEAVE:
        return _SE_LEAVE, 0
    _, written = ins.regs_access()
    writes_rsp = x86.X86_REG_RSP in written
    writes_rbp = x86.X86_REG_RBP in written
    if not (writes_rsp or writes_rbp):
        return _SE_NONE, 0
    ops = ins.operands
    if len(ops) == 2 and ops[0].type == x86.X86_OP_REG:
        dst, src = ops[0].reg, ops[1]
        if dst == x86.X86_REG_RSP and iid in (x86.X86_INS_SUB, x86.X86_INS_ADD) \
                and src.type == x86.X86_OP_IMM:
            return _SE_DELTA, (-src.imm if iid == x86.X86_INS_SUB else src.imm)
        if dst == x86.X86_REG_RSP and iid == x86.X86_INS_AND and src.type == x86.X86_OP_IMM:
            return _SE_AND, src.imm & MASK64
        if iid == x86.X86_INS_LEA and src.type == x86.X86_OP_MEM and src.mem.index == 0 \
                and src.mem.segment == 0:
            base, disp = src.mem.base, src.mem.disp
            if dst == x86.X86_REG_RSP and base == x86.X86_REG_RSP:
                return _SE_DELTA, disp
            if dst == x86.X86_REG_RBP and base == x86.X86_REG_RSP:
                return _SE_RBP_FROM_RSP, disp
            if dst == x86.X86_REG_RSP and base == x86.X86_REG_RBP:
                return _SE_RSP_FROM_RBP, disp
        if iid == x86.X86_INS_MOV and src.type == x86.X86_OP_REG:
            if dst == x86.X86_REG_RBP and src.reg == x86.X86_REG_RSP:
                return _SE_RBP_FROM_RSP, 0
            if dst == x86.X86_REG_RSP and src.reg == x86.X86_REG_RBP:
                return _SE_RSP_FROM_RBP, 0
    return (_SE_LOSE_RSP if writes_rsp else _SE_LOSE_RBP), 0


class CodeCache:
    """Decodes instructions at addresses, once each. `read(addr, n)` returns
    the code bytes there (fewer or none where memory ends)."""

    def __init__(self, read):
        self._read = read
        self._insns: dict[int, Insn] = {}
        self._runs: dict[int, tuple[list[int], Insn]] = {}
        self._bytes: dict[int, bytes] = {}

    def insn(self, addr: int) -> Insn:
        cached = self._insns.get(addr)
        if cached is not None:
            return cached
        try:
            code = self._read(addr, 16)
        except OSError:
            code = b""
        # the generator is run to its end (count 1), never left suspended: closed later by
        # the collector, a Ctrl-C landing in its GeneratorExit was an unraisable exception,
        # lost, and the recording ran on (tests/live/test_stepper_errors.py, once in CI)
        found = list(_MD_LITE.disasm_lite(code, addr, 1)) if code else []
        lite = found[0] if found else None
        if lite is not None:
            size, mnemonic, op_str = lite[1], lite[2], lite[3]
            self._bytes[addr] = bytes(code[:size])
            words = mnemonic.split()
            base = words[-1] if words else ""
            dest = op_str.split(",", 1)[0].strip()
            if not (base in _FLOW_MNEMONICS or base.startswith("j") or dest in _STACK_REGS):
                # no branch and no write to RSP/RBP: a plain instruction
                rep = words[0].startswith("rep") and len(words) > 1 if words else False
                result = Insn(addr, size, Kind.PLAIN, None, None, None, (_SE_NONE, 0), rep,
                              f"{mnemonic} {op_str}".strip())
                self._insns[addr] = result
                return result
        ins = next(_MD.disasm(code, addr, 1), None) if lite is not None else None
        if ins is None:
            result = Insn(addr, 1, Kind.UNDECODABLE, text="(bad)")
        else:
            kind, target = _classify(ins)
            cond = _condition_code(code) if kind == Kind.JCC else None
            rep = bool(ins.prefix[0] in (0xF2, 0xF3)) and kind == Kind.PLAIN and \
                capstone.CS_GRP_JUMP not in ins.groups and ins.mnemonic.startswith(("rep",))
            result = Insn(addr, ins.size, kind, target, ins, cond, _stack_effect(ins, kind),
                          rep, f"{ins.mnemonic} {ins.op_str}".strip())
        self._insns[addr] = result
        return result

    def read_code(self, addr: int, size: int) -> bytes:
        """The bytes of the instruction decoded at `addr` (as they were when the
        recorder decoded it; the target may be gone since), else read them now."""
        code = self._bytes.get(addr)
        if code is not None:
            return code
        return self._read(addr, size)

    def run(self, addr: int) -> tuple[list[int], Insn]:
        """The straight run from `addr`: the addresses of the plain instructions
        before the first one that is not plain, and that instruction."""
        info = self._runs.get(addr)
        if info is None:
            info = self._run_info(addr)
        return info[0], info[1]

    def _run_info(self, addr: int):
        """(ips, end instruction, stack effects of the run in order, set of ips),
        cached: the walker's hot path touches no per-instruction object."""
        info = self._runs.get(addr)
        if info is not None:
            return info
        ips = []
        effects = []
        a = addr
        while True:
            ins = self.insn(a)
            if ins.kind != Kind.PLAIN:
                break
            ips.append(a)
            if ins.stack[0]:
                effects.append(ins.stack)
            a = ins.next
        info = (ips, ins, effects, frozenset(ips))
        self._runs[addr] = info
        return info


class ShadowEntry:
    """A call the recorder saw: where it returns to and the stack slot that
    holds the return address (None when the walker lost track of RSP)."""
    __slots__ = ("ret", "slot")

    def __init__(self, ret: int, slot: int | None):
        self.ret = ret
        self.slot = slot


class Walk:
    """The outcome of one walk: the instructions that will run, the
    instruction the target must stop at, and the shadow stack afterwards."""
    __slots__ = ("ips", "reason", "stop")

    def __init__(self, ips, stop, reason):
        self.ips = ips
        self.stop = stop      # address to stop at (not yet executed)
        self.reason = reason  # "branch" | "armed" | "budget"


class Walker:
    """Predicts the path from a known state (RIP, RSP, RBP) to the first
    instruction whose outcome needs the registers.

    Direct jumps and calls are followed; a return is followed only when the
    top of the shadow stack is the call that pushed it *and* the walker knows
    RSP points at that call's slot (so a longjmp, a stack switch or a frame
    abandoned by Go's morestack never yields a wrong prediction: they make the
    walker stop at the return instead)."""

    def __init__(self, code: CodeCache, predict_returns: bool = True):
        self.code = code
        self.predict_returns = predict_returns

    def walk(self, rip: int, rsp: int | None, rbp: int | None, shadow: list[ShadowEntry],
             armed, budget: int) -> Walk:
        """Walk from `rip` (not yet executed); `shadow` is updated in place for
        the calls and returns followed. Stops before an address in `armed`,
        before the first instruction that needs the registers, or when `budget`
        instructions have been collected."""
        ips: list[int] = []
        run_info = self.code._run_info
        n_armed = len(armed)
        while True:
            run, end, effects, members = run_info(rip)
            base = len(ips)
            if base + len(run) >= budget or (n_armed and (
                    any(a in members for a in armed) if n_armed <= len(run)
                    else any(a in armed for a in run))):
                for i, a in enumerate(run):
                    if base + i >= budget:
                        ips.extend(run[:i])
                        return Walk(ips, a, "budget")
                    if a in armed:
                        ips.extend(run[:i])
                        return Walk(ips, a, "armed")
            for effect in effects:
                rsp, rbp = _apply(effect, rsp, rbp)
            ips.extend(run)
            if len(ips) >= budget:
                return Walk(ips, end.addr, "budget")
            if end.addr in armed:
                return Walk(ips, end.addr, "armed")
            kind = end.kind
            if kind == Kind.JMP:
                rip = end.target
            elif kind == Kind.CALL:
                if rsp is not None:
                    rsp = (rsp - 8) & MASK64
                shadow.append(ShadowEntry(end.next, rsp))
                rip = end.target
            elif kind == Kind.RET and self.predict_returns and shadow and rsp is not None \
                    and shadow[-1].slot == rsp and not end.cs.operands:
                rip = shadow.pop().ret
                rsp = (rsp + 8) & MASK64
            else:
                return Walk(ips, end.addr, "branch")
            ips.append(end.addr)


def _apply(effect, rsp, rbp):
    kind, value = effect
    if kind == _SE_DELTA:
        rsp = None if rsp is None else (rsp + value) & MASK64
    elif kind == _SE_RBP_FROM_RSP:
        rbp = None if rsp is None else (rsp + value) & MASK64
    elif kind == _SE_RSP_FROM_RBP:
        rsp = None if rbp is None else (rbp + value) & MASK64
    elif kind == _SE_LEAVE:
        rsp = None if rbp is None else (rbp + 8) & MASK64
        rbp = None
    elif kind == _SE_AND:
        rsp = None if rsp is None else rsp & value
    elif kind == _SE_LOSE_RSP:
        rsp = None
    elif kind == _SE_LOSE_RBP:
        rbp = None
        rsp = None if rsp is None else (rsp + value) & MASK64
    return rsp, rbp


# --- emulation of the stopping branch --------------------------------------------------------

_CF, _PF, _ZF, _SF, _OF = 1 << 0, 1 << 2, 1 << 6, 1 << 7, 1 << 11


def condition_holds(cond: int, rflags: int) -> bool:
    """Jcc condition `tttn` (SDM Vol. 2 Appendix B, Table B-10) on RFLAGS."""
    cf, pf, zf = bool(rflags & _CF), bool(rflags & _PF), bool(rflags & _ZF)
    sf, of = bool(rflags & _SF), bool(rflags & _OF)
    base = cond >> 1
    if base == 0:
        r = of
    elif base == 1:
        r = cf
    elif base == 2:
        r = zf
    elif base == 3:
        r = cf or zf
    elif base == 4:
        r = sf
    elif base == 5:
        r = pf
    elif base == 6:
        r = sf != of
    else:
        r = zf or (sf != of)
    return r != bool(cond & 1)


_REG_FIELD = {}
for _name in ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10",
              "r11", "r12", "r13", "r14", "r15", "rip"):
    _REG_FIELD[getattr(x86, "X86_REG_" + _name.upper())] = (_name, MASK64)
for _name, _full in (("eax", "rax"), ("ebx", "rbx"), ("ecx", "rcx"), ("edx", "rdx"),
                     ("esi", "rsi"), ("edi", "rdi"), ("ebp", "rbp"), ("esp", "rsp")):
    _REG_FIELD[getattr(x86, "X86_REG_" + _name.upper())] = (_full, 0xFFFFFFFF)
for _n in range(8, 16):
    _REG_FIELD[getattr(x86, f"X86_REG_R{_n}D")] = (f"r{_n}", 0xFFFFFFFF)


class EmulationError(Exception):
    """The instruction cannot be performed by the recorder; single-step it."""


def _reg(regs, reg_id: int, next_ip: int) -> int:
    if reg_id == x86.X86_REG_RIP:
        return next_ip
    if reg_id == x86.X86_REG_FS:
        return regs.fs_base
    if reg_id == x86.X86_REG_GS:
        return regs.gs_base
    field = _REG_FIELD.get(reg_id)
    if field is None:
        raise EmulationError(f"register {reg_id} not emulated")
    return getattr(regs, field[0]) & field[1]


def operand_value(ins: Insn, regs, read_u64) -> int:
    """The target of an indirect JMP/CALL: its register, or the quadword at its
    memory operand (segment base + base + index*scale + disp, RIP-relative from
    the next instruction)."""
    ops = ins.cs.operands
    if len(ops) != 1:
        raise EmulationError(f"{ins.text}: unexpected operands")
    op = ops[0]
    if op.type == x86.X86_OP_REG:
        return _reg(regs, op.reg, ins.next)
    if op.type == x86.X86_OP_MEM and op.size == 8:
        m = op.mem
        addr = m.disp
        if m.base:
            addr += _reg(regs, m.base, ins.next)
        if m.index:
            addr += _reg(regs, m.index, ins.next) * m.scale
        if m.segment:
            addr += _reg(regs, m.segment, ins.next)
        return read_u64(addr & MASK64)
    raise EmulationError(f"{ins.text}: operand form not emulated")


def perform(ins: Insn, regs, read_u64, write_u64) -> int:
    """Carry out the branch `ins` on `regs` (RIP, RSP, RCX and the pushed
    return address as the CPU would) and return the new RIP. Raises
    EmulationError for anything it does not handle (the caller single-steps)."""
    kind = ins.kind
    if kind == Kind.JCC:
        new = ins.target if condition_holds(ins.cond, regs.eflags) else ins.next
    elif kind == Kind.RET:
        ops = ins.cs.operands
        pop = ops[0].imm if ops else 0
        new = read_u64(regs.rsp)
        regs.rsp = (regs.rsp + 8 + pop) & MASK64
    elif kind == Kind.JMP_INDIRECT:
        new = operand_value(ins, regs, read_u64)
    elif kind == Kind.CALL_INDIRECT:
        new = operand_value(ins, regs, read_u64)
        regs.rsp = (regs.rsp - 8) & MASK64
        write_u64(regs.rsp, ins.next)
    elif kind == Kind.LOOP:
        iid = ins.cs.id
        if iid in (x86.X86_INS_JRCXZ, x86.X86_INS_JECXZ):
            mask = 0xFFFFFFFF if iid == x86.X86_INS_JECXZ else MASK64
            taken = (regs.rcx & mask) == 0
        else:
            regs.rcx = (regs.rcx - 1) & MASK64
            taken = regs.rcx != 0
            if iid == x86.X86_INS_LOOPE:
                taken = taken and bool(regs.eflags & _ZF)
            elif iid == x86.X86_INS_LOOPNE:
                taken = taken and not (regs.eflags & _ZF)
        new = ins.target if taken else ins.next
    elif kind in (Kind.JMP, Kind.CALL):
        if kind == Kind.CALL:
            regs.rsp = (regs.rsp - 8) & MASK64
            write_u64(regs.rsp, ins.next)
        new = ins.target
    else:
        raise EmulationError(f"{ins.text}: not a branch the recorder performs")
    regs.rip = new
    return new
