"""FlowEncoder: an executed instruction path -> the Intel PT stream the hardware would write.

Layer: pt_decoder, above encoder.py (it writes packets with `Encoder`) and beside the
decoders (it reads code through a caller's callable, never through image.py or adapter).
The ptrace stepper recorder (machines without Intel PT) and the tests that need a real
program's path as PT use it; benchmarks/corpus.py builds the benchmark stream with it.

Input: `read_code(addr, size) -> bytes` (an image, a /proc/PID/mem snapshot...) and the
sequence of executed instruction addresses, one per retired instruction; optionally a TSC
per instruction, values to report as PTWRITE at given instructions, and `end_ip`, the
address execution continued at after the last instruction (if known).

Which packets appear where (SDM Vol. 3C, "Intel Processor Trace", sections "Control Flow
Tracing", "Packet Generation" and the packet tables):
  start       PSB+ while tracing is off: PSB, [TSC, TMA, CBR when timing], PSBEND;
              then [TSC, TMA when timing], MODE.Exec, TIP.PGE(first IP).
  cond. jump (jcc, jrcxz, loop*)   one TNT bit: taken iff the next IP != fall-through.
              Bits are packed oldest-first into TNT-8 (6 bits; or TNT-64, 47 bits, with
              long_tnt=True) and flushed before any other packet, as the hardware does.
  direct jmp/call                  nothing (the decoder follows the code). A call pushes
              its return address on the encoder's return stack (64 entries, like
              libipt's), except a call to the next instruction (PIC idiom), as the SDM says.
  ret         return compression on and the target == the top of that stack: pop, one
              taken TNT bit. Otherwise TIP(target) and the stack is left alone (libipt pops
              only compressed returns).
  indirect jmp/call                TIP(target); the call pushes its return address.
  far transfer (syscall, sysenter, int n, int3, iret, far call/jmp/ret)
              TIP.PGD with the IP suppressed (user-space tracing stops in the kernel), then
              at the next instruction [TSC, TMA], MODE.Exec, TIP.PGE(next IP).
  a step not explained by the code (a signal, an interrupt, a ptrace-moved RIP):
              the instruction's own outcome as far as it is known (non-branch: fall-through;
              direct jmp/call: target; jcc: not taken; ret: compressed if the stack has an
              entry) then FUP(that IP) + TIP.PGD(suppressed) -- or TIP(new IP) instead of
              TIP.PGD with discontinuity="fup_tip" -- then MODE.Exec + TIP.PGE(new IP).
              For an indirect branch or a ret without a stack entry the target is unknown,
              so TIP.PGD(suppressed) binds to that branch instead.
  untraced callee (untraced={k: target}: the indirect call k went to `target`, which ran
              untraced and returned to the next instruction of the path, as a PT address
              filter leaves it): TIP.PGD(target), then [TSC, TMA], MODE.Exec,
              TIP.PGE(return address). A decoder binds the TIP.PGD to the call (libipt's
              rule, and insn.pyx's): the call opens no frame (no CALL bit, nothing pushed
              for return compression), so depths and stacks read on in the caller.
  rep string instructions          a repeated IP of a non-branch is the same instruction
              iterating (single-stepping sees each iteration): no packets.
  PTWRITE     values attached to instruction k: PTW(value, 8 bytes, IP=1) + FUP(IP of k),
              before k's own branch packets.
  PSB+        every `psb_period` bytes, between instructions while tracing: PSB, [TSC,
              TMA, CBR], MODE.Exec, FUP(next IP), PSBEND. The return stack is cleared
              (the SDM allows compression only for calls since the last PSB).
  timing (timing=True)             TSC in every PSB+ and before each TIP.PGE, each
              followed by TMA (as the SDM says when MTC is on); CBR in PSB+; MTC when
              the crystal clock counter (CTC = TSC * eax / ebx of CPUID leaf 0x15)
              enters a new 2^mtc_freq period: one MTC for the last edge the clock
              crossed between two instructions (or one every 255 periods across a long
              gap, so that the 8-bit payload stays unambiguous), carrying that edge's
              CTC, never the later stamp's.
              With cyc=True also CYC(core cycles since the last CYC) before every TNT,
              TIP*, FUP, PTW and MTC, from the caller's cycle counts or else TSC ticks
              (CBR == nom_freq: the core runs at the TSC's rate), and before each TSC
              and PSB+: the CYC before an MTC counts the cycles up to its edge exactly
              (interpolated between the two stamps), so the cycles between MTCs add up
              to their CTC distance and the decoded time never runs past the next MTC
              or TSC.
  end         the last instruction's outcome (towards end_ip if given), FUP(end_ip) +
              TIP.PGD(suppressed) -- or TIP.PGD(end_ip) when the last instruction is an
              indirect branch or an uncompressed ret.

Errors: ValueError naming the address for code that cannot be read or decoded, and for
option values out of range.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import capstone

from pt_decoder.encoder import Encoder

# Instruction classes (what the flow needs to know about an instruction).
OTHER, COND, JMP, CALL, IJMP, ICALL, RET, FAR = range(8)
CLASS_NAMES = ("other", "cond", "jmp", "call", "ijmp", "icall", "ret", "far")

_FAR_MNEMONICS = {"syscall", "sysenter", "sysexit", "sysret", "int", "int1", "int3", "into",
                  "iret", "iretd", "iretq", "retf", "retfq", "lcall", "ljmp", "vmcall",
                  "vmlaunch", "vmresume", "vmmcall"}
_RETURN_STACK_DEPTH = 64          # libipt's pt_retstack_size
_MAX_INSN = 15


class FlowEncoder:
    """Encode executed instruction paths as PT streams (see the module doc for the packets).

    FlowEncoder(read_code, *, bits=64, return_compression=True, psb_period=4096,
                timing=False, cyc=False, long_tnt=False, discontinuity="pgd_pge",
                mtc_freq=3, nom_freq=36, cpuid_0x15=(2, 300))
    """

    def __init__(self, read_code: Callable[[int, int], bytes], *, bits: int = 64,
                 return_compression: bool = True, psb_period: int = 4096,
                 timing: bool = False, cyc: bool = False, long_tnt: bool = False,
                 discontinuity: str = "pgd_pge", mtc_freq: int = 3, nom_freq: int = 36,
                 cpuid_0x15: tuple[int, int] = (2, 300)):
        if bits not in (32, 64):
            raise ValueError(f"bits must be 32 or 64, got {bits!r}")
        if psb_period < 0:
            raise ValueError(f"psb_period must be >= 0 bytes (0: no periodic PSB+), "
                             f"got {psb_period}")
        if discontinuity not in ("pgd_pge", "fup_tip"):
            raise ValueError(f"discontinuity must be 'pgd_pge' or 'fup_tip', "
                             f"got {discontinuity!r}")
        if not 0 <= mtc_freq <= 15:
            raise ValueError(f"mtc_freq must be 0..15, got {mtc_freq}")
        eax, ebx = cpuid_0x15
        if timing and not (eax > 0 and ebx > 0 and ebx // eax < 512):
            raise ValueError(f"cpuid_0x15 must be (eax, ebx) > 0 with ebx/eax < 512 "
                             f"(TMA's 9-bit fast counter), got {cpuid_0x15!r}")
        self.read_code = read_code
        self.bits = bits
        self.return_compression = return_compression
        self.psb_period = psb_period
        self.timing = timing
        self.cyc = cyc and timing
        self.long_tnt = long_tnt
        self.discontinuity = discontinuity
        self.mtc_freq = mtc_freq
        self.nom_freq = nom_freq
        self.cpuid_0x15 = (eax, ebx)
        self._md = capstone.Cs(capstone.CS_ARCH_X86,
                               capstone.CS_MODE_64 if bits == 64 else capstone.CS_MODE_32)
        self._md.detail = True
        self._insns: dict[int, tuple[int, int, int]] = {}
        """Cache: ip -> (class, fall-through, direct target or 0)."""

    # ---- instruction classification ----------------------------------------------------
    def classify(self, ip: int) -> tuple[int, int, int]:
        """(class, fall-through IP, direct branch target or 0) of the instruction at ip."""
        hit = self._insns.get(ip)
        if hit is not None:
            return hit
        try:
            code = self.read_code(ip, _MAX_INSN)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise ValueError(f"cannot read code at {ip:#x}: {exc}") from exc
        if not code:
            raise ValueError(f"no code mapped at {ip:#x}")
        insn = next(self._md.disasm(bytes(code), ip, 1), None)
        if insn is None:
            raise ValueError(f"cannot decode the instruction at {ip:#x} "
                             f"(bytes {bytes(code[:_MAX_INSN]).hex()})")
        fall = ip + insn.size
        mnemonic = insn.mnemonic.split()[-1]          # "bnd jmp", "notrack call" ...
        target = 0
        ops = insn.operands
        direct = bool(ops) and ops[0].type == capstone.x86.X86_OP_IMM
        if mnemonic in _FAR_MNEMONICS:
            cls = FAR
        elif mnemonic == "ret":
            cls = RET
        elif mnemonic == "call":
            cls = CALL if direct else ICALL
        elif mnemonic == "jmp":
            cls = JMP if direct else IJMP
        elif mnemonic.startswith(("j", "loop")) and direct:
            cls = COND
        else:
            cls = OTHER
        if cls in (CALL, JMP, COND):
            target = ops[0].imm & ((1 << self.bits) - 1)
        hit = (cls, fall, target)
        self._insns[ip] = hit
        return hit

    # ---- encoding ----------------------------------------------------------------------
    def encode(self, ips: Sequence[int], *, tscs: Sequence[int] | None = None,
               cycles: Sequence[int] | None = None,
               ptwrites: Mapping[int, int] | None = None,
               end_ip: int | None = None, tsc_start: int = 1 << 40,
               cycles_per_insn: int = 1,
               untraced: Mapping[int, int] | None = None) -> bytes:
        """The PT stream of the path `ips` (one address per retired instruction).

        tscs: the TSC of each instruction (monotonic); without it, with timing on, the
        clock advances `cycles_per_insn` ticks per instruction from `tsc_start`.
        cycles: a running core-cycle count per instruction (monotonic), for CYC; without
        it core cycles are TSC ticks.
        ptwrites: instruction index -> the 64-bit value to report as a PTWRITE there (one
        per instruction, as one PTWRITE instruction writes one packet).
        end_ip: where execution went after the last instruction, if known.
        untraced: instruction index -> the target of the indirect call there, whose callee
        ran untraced and returned to the next instruction of the path (or had not returned
        when the path ends there: end_ip is then ignored)."""
        if tscs is not None and len(tscs) != len(ips):
            raise ValueError(f"tscs has {len(tscs)} stamps for {len(ips)} instructions")
        if cycles is not None and len(cycles) != len(ips):
            raise ValueError(f"cycles has {len(cycles)} counts for {len(ips)} instructions")
        for index, value in (ptwrites or {}).items():
            if not 0 <= index < len(ips):
                raise ValueError(f"ptwrites index {index} is outside the path "
                                 f"(0..{len(ips) - 1})")
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
                raise ValueError(f"ptwrites[{index}] must be one 64-bit value, got {value!r}")
        for index, target in (untraced or {}).items():
            if not 0 <= index < len(ips) or self.classify(ips[index])[0] != ICALL or (
                    index + 1 < len(ips) and self.classify(ips[index])[1] != ips[index + 1]):
                raise ValueError(f"untraced[{index}]: not an indirect call followed in the "
                                 f"path by its return address")
            if not isinstance(target, int) or not 0 <= target < 2**64:
                raise ValueError(f"untraced[{index}] must be an address, got {target!r}")
        run = EncodingRun(self, tscs, cycles, tsc_start, cycles_per_insn, ptwrites or {},
                   untraced or {})
        return run.encode(ips, end_ip)

    def start(self, *, tscs=None, ptwrites: Mapping[int, int] | None = None,
              untraced: Mapping[int, int] | None = None) -> EncodingRun:
        """A stream encoded piece by piece while its path is still being recorded (the
        ptrace stepper encodes what it recorded while the thread runs to its next stop):
        `begin(ips)`, `feed(ips, upto)` any number of times, `finish(ips, end_ip)`. The
        bytes equal encode()'s for the whole path. `tscs`, `ptwrites` and `untraced` are
        read as the pieces are encoded (a sequence and mappings the caller may still be
        filling beyond them), and are not checked as encode() checks them."""
        return EncodingRun(self, tscs, None, 1 << 40, 1, ptwrites if ptwrites is not None
                           else {}, untraced if untraced is not None else {})

    def stats(self) -> dict:
        return {"cached_instructions": len(self._insns)}


class EncodingRun:
    """State of one encoded stream (encode(), or start()'s pieces): the encoder, pending TNT
    bits, return stack, clocks."""

    def __init__(self, fe: FlowEncoder, tscs, cycles, tsc_start, cycles_per_insn, ptwrites,
                 untraced):
        self.fe = fe
        self.untraced = untraced
        self.enc = Encoder()
        self.out = self.enc._out                  # TNT-8 bytes go straight in (hot path)
        self.bits = 0
        self.nbits = 0
        self.stack: list[int] = []
        self.tscs = tscs
        self.tsc_start = tsc_start
        self.cycles_per_insn = cycles_per_insn
        self.ptwrites = ptwrites
        self.now = tsc_start
        self.cycles = cycles
        self.cyc_now = self.last_cyc = tsc_start if cycles is None else cycles[0]
        eax, ebx = fe.cpuid_0x15
        self.eax, self.ebx = eax, ebx
        self.next_mtc_tsc = 0
        self.ref_ctc = 0
        """CTC the decoder last learned (the last TMA's or MTC's): the next MTC must lie
        fewer than 256 MTC periods after it, or its 8-bit payload is ambiguous."""
        self.next_psb = fe.psb_period if fe.psb_period else 1 << 62

    # ---- timing helpers -------------------------------------------------------------
    def _ctc(self, tsc: int) -> int:
        return tsc * self.eax // self.ebx

    def _arm_mtc(self, tsc: int) -> None:
        """Remember the TSC at which the CTC enters its next 2^mtc_freq period."""
        period = 1 << self.fe.mtc_freq
        next_ctc = (self._ctc(tsc) // period + 1) * period
        self.next_mtc_tsc = -(-next_ctc * self.ebx // self.eax)      # ceil

    def _cyc(self) -> None:
        if self.fe.cyc and self.cyc_now > self.last_cyc:
            self.enc.cyc(self.cyc_now - self.last_cyc)
            self.last_cyc = self.cyc_now

    def _mtcs_until(self, new_now: int, new_cyc: int) -> None:
        """The clock moves from the current instruction's stamp (self.now / cyc_now) to
        the next one's (new_now / new_cyc), crossing one or more MTC periods: write the
        MTC of the last period edge crossed, as the hardware does at that edge.

        The decoder (libipt's model, SDM "MTC" and "CYC" packets) sets its time to the
        edge at an MTC and counts the following CYCs from there, and calibrates the
        cycle:TSC ratio from the CYC cycles counted between two MTCs. So the CYC before
        an MTC carries exactly the cycles up to the edge (interpolated between the two
        stamps) and the next CYC the cycles after it: a CYC carrying cycles past the
        edge makes the MTC pull the time back, and skews the calibration so that later
        CYCs overshoot the next TSC. Long gaps get an MTC every 255 periods at least,
        since the 8-bit payload cannot tell more periods apart."""
        self.flush()                                 # earlier instructions' TNT, and
        self._cyc()                                  # the cycles up to their stamp
        period = 1 << self.fe.mtc_freq
        last_edge = self._ctc(new_now) // period * period
        prev_now, prev_cyc = self.now, self.cyc_now
        span = new_now - prev_now
        while True:
            edge = min(last_edge, (self.ref_ctc + 255 * period) // period * period)
            edge_tsc = -(-edge * self.ebx // self.eax)
            if span > 0:
                self.cyc_now = prev_cyc + (new_cyc - prev_cyc) * max(
                    0, min(edge_tsc - prev_now, span)) // span
            self._cyc()
            self.enc.mtc((edge >> self.fe.mtc_freq) & 0xFF)
            self.ref_ctc = edge
            if edge >= last_edge:
                break
        self.cyc_now = prev_cyc
        self._arm_mtc(new_now)

    def _tsc(self) -> None:
        """TSC, and TMA right after it (SDM: TMA follows TSC when MTC is enabled; libipt
        ignores MTCs between a TSC and its TMA). The caller has written the CYC up to
        now, so the cycles between MTCs add up to their CTC distance."""
        self.enc.tsc(self.now & ((1 << 56) - 1))
        self.last_cyc = self.cyc_now
        self._tma()
        self._arm_mtc(self.now)

    def _tma(self) -> None:
        ctc = self._ctc(self.now)
        edge_tsc = -(-ctc * self.ebx // self.eax)            # TSC at that CTC tick
        self.enc.tma(ctc & 0xFFFF, max(0, self.now - edge_tsc) & 0x1FF)
        self.ref_ctc = ctc

    # ---- packets --------------------------------------------------------------------
    def flush(self) -> None:
        """Write the pending TNT bits (oldest first) as TNT-8 / TNT-64 packets."""
        n, bits = self.nbits, self.bits
        if not n:
            return
        self._cyc()
        if self.fe.long_tnt and n > 6:
            self.enc.tnt64(bits, n)
        else:
            while n:
                take = min(n, 6)
                n -= take
                chunk = bits >> n
                bits &= (1 << n) - 1
                self.out.append(((chunk << 1) | (1 << (take + 1))) & 0xFF)
        self.bits = self.nbits = 0

    def _bit(self, taken: int) -> None:
        self.bits = (self.bits << 1) | taken
        self.nbits += 1
        if self.nbits == (47 if self.fe.long_tnt else 6):
            self.flush()

    def _psb_plus(self, fup_ip: int | None) -> None:
        self.flush()
        enc = self.enc
        if self.fe.timing:
            self._cyc()                              # no CYC inside PSB+
        enc.psb()
        if self.fe.timing:
            self._tsc()
            enc.cbr(self.fe.nom_freq)
        if fup_ip is not None:
            enc.mode_exec(self.fe.bits)
            enc.fup(fup_ip)
        enc.psbend()
        self.stack.clear()
        self.next_psb = enc.offset + self.fe.psb_period if self.fe.psb_period else 1 << 62

    def _enable(self, ip: int) -> None:
        if self.fe.timing:
            self._cyc()
            self._tsc()
        self.enc.mode_exec(self.fe.bits)
        self.enc.tip_pge(ip)

    def _disable(self, known: int | None, new_ip: int | None) -> None:
        """Tracing stops after the current instruction: FUP(known) + TIP.PGD, or a bare
        TIP.PGD binding to the current branch when its target is unknown (known=None)."""
        self.flush()
        self._cyc()
        enc = self.enc
        if known is not None and new_ip is not None and self.fe.discontinuity == "fup_tip":
            enc.fup(known)
            enc.tip(new_ip)
            return
        if known is not None:
            enc.fup(known)
        enc.tip_pgd(None)
        self.stack.clear()
        if new_ip is not None:
            self._enable(new_ip)

    def _push(self, ret: int) -> None:
        stack = self.stack
        stack.append(ret)
        if len(stack) > _RETURN_STACK_DEPTH:
            del stack[0]

    def _unexplained(self, cls: int, fall: int, target: int, new_ip: int | None) -> None:
        """The path leaves this instruction for new_ip, which the code does not explain."""
        known: int | None
        if cls == OTHER:
            known = fall
        elif cls == JMP:
            known = target
        elif cls == CALL:
            known = target
            if target != fall:
                self._push(fall)
        elif cls == COND:
            self._bit(0)
            known = fall
        elif cls == RET and self.fe.return_compression and self.stack:
            self._bit(1)
            known = self.stack.pop()
        else:                                        # indirect, uncompressed ret
            known = None
        self._disable(known, new_ip)

    # ---- the path -------------------------------------------------------------------
    def encode(self, ips: Sequence[int], end_ip: int | None) -> bytes:
        if not len(ips):
            return b""
        self.begin(ips)
        return self.finish(ips, end_ip)

    def begin(self, ips: Sequence[int]) -> None:
        """Start the stream at ips[0] (which, with its stamp tscs[0], must exist)."""
        if self.tscs is not None:
            self.now = self.tscs[0]
            if self.cycles is None:
                self.cyc_now = self.last_cyc = self.tscs[0]
        self._psb_plus(None)
        self._enable(ips[0])
        self.position = 0
        """Instructions encoded so far (the path's prefix ips[:position])."""

    def feed(self, ips: Sequence[int], upto: int) -> None:
        """Encode the path's instructions up to ips[upto] (not included), which must exist:
        each instruction's packets depend on the address after it. The stamps, PTWRITE
        values and untraced calls of those instructions must be final."""
        if upto > self.position:
            self._steps(ips, self.position, upto, None)
            self.position = upto

    def finish(self, ips: Sequence[int], end_ip: int | None) -> bytes:
        """Encode the rest of the path, its last instruction towards `end_ip`; the stream."""
        self._steps(ips, self.position, len(ips), end_ip)
        self.position = len(ips)
        self.flush()
        return self.enc.getvalue()

    def _steps(self, ips: Sequence[int], start: int, stop: int, end_ip: int | None) -> None:
        fe = self.fe
        classify = fe.classify
        cache = fe._insns
        n = len(ips)
        timing = fe.timing
        tscs = self.tscs
        ptwrites = self.ptwrites
        compress = fe.return_compression
        enc = self.enc
        out = self.out
        stack = self.stack
        for k in range(start, stop):
            ip = ips[k]
            nxt = ips[k + 1] if k + 1 < n else None
            if timing:
                now = tscs[k] if tscs is not None else (
                    self.tsc_start + k * self.cycles_per_insn)
                cyc_now = now if self.cycles is None else self.cycles[k]
                if now >= self.next_mtc_tsc:
                    self._mtcs_until(now, cyc_now)
                self.now = now
                self.cyc_now = cyc_now
            if ptwrites and k in ptwrites:
                self.flush()
                self._cyc()
                enc.ptw(ptwrites[k], 8, ip=True)
                enc.fup(ip)
            info = cache.get(ip)
            if info is None:
                info = classify(ip)
            cls, fall, target = info
            if nxt is None:
                if self.untraced and k in self.untraced:
                    self.flush()
                    self._cyc()
                    enc.tip_pgd(self.untraced[k])        # ended in the untraced callee
                    break
                self._finish(cls, fall, target, end_ip)
                break
            if cls == OTHER:
                if nxt in (fall, ip):
                    continue
            elif cls == COND:
                if nxt in (target, fall):
                    self._bit(1 if nxt != fall else 0)
                    if len(out) >= self.next_psb:
                        self._psb_plus(nxt)
                    continue
            elif cls == JMP:
                if nxt == target:
                    continue
            elif cls == CALL:
                if nxt == target:
                    if target != fall:
                        self._push(fall)
                    continue
            elif cls == RET:
                if compress and stack and stack[-1] == nxt:
                    stack.pop()
                    self._bit(1)
                    self._maybe_psb(nxt)
                    continue
                self.flush()
                self._cyc()
                enc.tip(nxt)
                self._maybe_psb(nxt)
                continue
            elif cls in (IJMP, ICALL):
                self.flush()
                self._cyc()
                if self.untraced and k in self.untraced:
                    enc.tip_pgd(self.untraced[k])        # into the untraced callee
                    stack.clear()
                    self._enable(nxt)                    # back at its return address
                    continue
                enc.tip(nxt)
                if cls == ICALL:
                    self._push(fall)
                self._maybe_psb(nxt)
                continue
            elif cls == FAR:
                self.flush()
                self._cyc()
                enc.tip_pgd(None)
                stack.clear()
                self._enable(nxt)
                continue
            # Not explained by the code: a signal, an interrupt, a moved RIP.
            self._unexplained(cls, fall, target, nxt)

    def _maybe_psb(self, nxt: int) -> None:
        if self.enc.offset >= self.next_psb:
            self._psb_plus(nxt)

    def _finish(self, cls: int, fall: int, target: int, end_ip: int | None) -> None:
        """The last instruction: its outcome towards end_ip (if known), then disable."""
        enc = self.enc
        if (end_ip is not None and cls in (IJMP, ICALL)) or (
                cls == RET and end_ip is not None and not (
                    self.fe.return_compression and self.stack and self.stack[-1] == end_ip)):
            self.flush()
            self._cyc()
            enc.tip_pgd(end_ip)                      # the branch's target, tracing off
            return
        if cls == FAR:
            self.flush()
            self._cyc()
            enc.tip_pgd(None)
            return
        if end_ip is not None and cls == COND and end_ip in (fall, target):
            self._bit(1 if end_ip != fall else 0)
            self._disable(end_ip, None)
            return
        self._unexplained(cls, fall, target, None)
