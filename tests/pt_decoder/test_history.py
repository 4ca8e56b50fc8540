"""pt_decoder.history on a real execution: sum_squares of lines_demo.c, single-stepped
under ptrace, classified with capstone, stepped through by line, call and address.

The stepping queries are checked two ways: against the fixture's `// @marker`
lines (what a user expects), and at every position against a plain-Python
restatement of their contract over explicit depth and line lists.
"""
from __future__ import annotations

import pathlib
import random
import subprocess
import time
from array import array

import capstone
import pytest
from fixture_builds import build_c, marker_line

from adapter.hw import ptrace
from pt_decoder import insn_flags as F
from pt_decoder.errors import ErrorCode, PtError
from pt_decoder.history import FORMAT_VERSION, Gap, History, HistoryBuilder, Insn, Step
from pt_decoder.image import Image
from pt_decoder.lines import LineTable

SRC = "lines_demo.c"


class Recording:
    """The true path of one call of sum_squares(10), from its first instruction to
    the first instruction back in main, with the per-stop clock as time."""

    def __init__(self, binary):
        self.binary = str(binary)
        proc = subprocess.Popen([self.binary, "10", "step"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            self._record(proc)
        finally:
            proc.kill()
            proc.wait()

    def _record(self, proc):
        pid = proc.pid
        time.sleep(0.05)
        ptrace.seize(pid)
        ptrace.interrupt(pid)
        assert ptrace.waitpid(pid).stopped
        self.image = Image.from_process(pid)
        exe = next(m for m in self.image.modules if m.path == self.binary)
        self.base = exe.base
        entry = self.image.find_symbol("sum_squares")[0]
        word = ptrace.peekdata(pid, entry)
        ptrace.pokedata(pid, entry, (word & ~0xFF) | 0xCC)   # int3
        ptrace.cont(pid)
        proc.stdin.write(b"x")
        proc.stdin.flush()
        status = ptrace.waitpid(pid)
        assert status.stopped and status.stop_signal == 5, status.describe()
        ptrace.pokedata(pid, entry, word)
        regs = ptrace.getregs(pid)
        assert regs.rip == entry + 1
        regs.rip = entry
        ptrace.setregs(pid, regs)
        with ptrace.Memory(pid) as mem:
            back = mem.read_u64(regs.rsp)
        ips, times = [entry], [time.perf_counter_ns()]
        while ips[-1] != back:
            ptrace.singlestep(pid)
            assert ptrace.waitpid(pid).stopped
            ips.append(ptrace.getregs(pid).rip)
            times.append(time.perf_counter_ns())
            assert len(ips) < 20_000, "sum_squares did not return"
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        md.detail = True
        flags = []
        for k, ip in enumerate(ips):
            insn = next(md.disasm(self.image.read(ip, 16), ip, 1))
            f = 0
            if insn.group(capstone.CS_GRP_CALL):
                f |= F.CALL | F.TAKEN
            elif insn.group(capstone.CS_GRP_RET):
                f |= F.RETURN | F.TAKEN | F.INDIRECT
            elif insn.group(capstone.CS_GRP_JUMP):
                if insn.mnemonic != "jmp":
                    f |= F.CONDITIONAL
                if k + 1 < len(ips) and ips[k + 1] != ip + insn.size:
                    f |= F.TAKEN
            flags.append(f)
        flags[0] |= F.RESUMED
        self.ips = array("Q", ips)
        self.times = array("Q", times)
        self.cycles = array("Q", range(0, 3 * len(ips), 3))
        self.flags = array("B", flags)
        # Depth of every instruction, by the definition (history.depth's docstring).
        self.depths = [0]
        for f in flags[:-1]:
            self.depths.append(self.depths[-1] + (1 if f & F.CALL else 0) - (1 if f & F.RETURN else 0))


@pytest.fixture(scope="module")
def rec(tmp_path_factory):
    return Recording(build_c(SRC, tmp_path_factory.mktemp("history"), "-g", "-O0"))


@pytest.fixture(scope="module")
def lines(rec):
    return LineTable.for_elf(rec.binary, rec.base)


@pytest.fixture(scope="module")
def hist(rec):
    return History.from_columns(rec.ips, rec.times, rec.cycles, rec.flags, [], {"thread": 1})


def line_list(rec, lines):
    return list(lines.line_ids(rec.ips, statements=True))


def ref_prev_line(L, D, p, low, over):
    """The contract of History.prev_line, spelled out over explicit lists."""
    d, here, found = D[p], L[p], None
    for q in range(p - 1, low - 1, -1):
        if D[q] < d or ((D[q] == d or not over) and L[q] not in (0, here)):
            found = q
            break
    if found is None:
        return low, False
    fd, tl, accepted = D[found], L[found], found
    for q in range(found - 1, low - 1, -1):
        if D[q] < fd or (D[q] > fd and not over):
            break
        if D[q] > fd:
            continue
        if L[q] not in (0, tl):
            break
        accepted = q
    return accepted, True


def ref_next_line(L, D, p, high, over):
    d, here = D[p], L[p]
    for q in range(p + 1, high):
        if D[q] < d or ((D[q] == d or not over) and L[q] not in (0, here)):
            return q, True
    return high - 1, False


@pytest.mark.live
def test_columns_round_trip(rec, hist):
    n = len(rec.ips)
    assert len(hist) == n > 150
    assert hist.ips() == rec.ips and hist.times() == rec.times
    assert hist.cycles_range() == rec.cycles and hist.flags_range() == rec.flags
    assert hist[5] == Insn(5, rec.ips[5], rec.times[5], rec.cycles[5], rec.flags[5])
    assert hist[-1].ip == rec.ips[-1] and hist.ips(3, 9) == rec.ips[3:9]
    assert list(hist.distinct_ips) == sorted(set(rec.ips))
    assert hist.prev_position(0) is None and hist.next_position(n - 1) is None
    assert hist.prev_position(7) == 6 and hist.next_position(7) == 8
    with pytest.raises(IndexError):
        hist.ip(n)
    with pytest.raises(IndexError):
        hist.ips(5, n + 1)


@pytest.mark.live
def test_depth_calls_and_returns(rec, hist):
    D = rec.depths
    assert [hist.depth(p) for p in range(len(D))] == D
    assert D[-1] == -1                     # the history ends back in main
    square = rec.image.find_symbol("square")[0]
    calls = [p for p in range(len(D)) if rec.flags[p] & F.CALL]
    assert len(calls) == 10 and all(rec.ips[c + 1] == square for c in calls)
    for c in calls:
        r = hist.matching_return(c)
        assert rec.flags[r] & F.RETURN and rec.ips[r + 1] > rec.ips[c] and D[r] == D[c] + 1
        assert all(D[q] > D[c] for q in range(c + 1, r + 1))
        assert hist.matching_call(r) == c
        for q in range(c + 1, r + 1):
            assert hist.caller(q) == c
    for p in range(len(D)):
        earlier = [c for c in calls if c < p and D[c] == D[p]]
        assert hist.prev_call(p) == (earlier[-1] if earlier else None)
        later = [c for c in calls if c > p and D[c] == D[p]]
        assert hist.next_call(p) == (later[0] if later else None)
    ret = len(D) - 2
    assert rec.flags[ret] & F.RETURN and hist.next_return(0) == ret and hist.caller(0) is None


@pytest.mark.live
def test_step_by_line_follows_the_markers(rec, hist, lines):
    L = line_list(rec, lines)
    D = rec.depths
    key = lines.line_key

    def runs_of(marker):
        line = marker_line(SRC, marker)
        return [p for p in range(len(L)) if key(L[p]) and key(L[p])[1] == line
                and (p == 0 or L[p - 1] != L[p])]

    # Back from `return y` lands on the first instruction of `int y = x * x`.
    for p in runs_of("square_return"):
        step = hist.prev_line(p, lines)
        assert step.reason == "found" and key(L[step.position])[1] == marker_line(SRC, "square_body")
        assert L[step.position - 1] != L[step.position] and D[step.position] == D[p]
    # After square returns, back over the call: the loop line; back into it: square.
    call = next(p for p in range(len(L)) if rec.flags[p] & F.CALL)
    after = hist.matching_return(call) + 1
    over = hist.prev_line(after, lines)
    assert key(L[over.position])[1] == marker_line(SRC, "sum_loop") and D[over.position] == D[after]
    into = hist.prev_line(after, lines, over_calls=False)
    assert D[into.position] == D[after] + 1 and rec.image.symbolize(rec.ips[into.position]).name == "square"
    # Forward from the call: over it to the loop line, into it to square's first line.
    fwd = hist.next_line(call, lines)
    assert key(L[fwd.position])[1] == marker_line(SRC, "sum_loop") and D[fwd.position] == D[call]
    fin = hist.next_line(call, lines, over_calls=False)
    assert fin.position == call + 1 and key(L[fin.position])[1] == marker_line(SRC, "square_entry")
    # From main after the return there is nothing of main before: the history's start.
    assert hist.prev_line(len(L) - 1, lines) == Step(0, "start")
    assert hist.next_line(len(L) - 1, lines) == Step(len(L) - 1, "end")


@pytest.fixture(scope="module")
def rec_o2(tmp_path_factory):
    return Recording(build_c(SRC, tmp_path_factory.mktemp("history_o2"), "-g", "-O2"))


@pytest.mark.live
@pytest.mark.parametrize("optimised", [False, True], ids=["O0", "O2"])
def test_step_by_line_at_every_position_matches_its_contract(optimised, request):
    """At -O2 the statement line ids fold is_stmt=false rows, and calls sit mid-line."""
    rec = request.getfixturevalue("rec_o2" if optimised else "rec")
    lines = LineTable.for_elf(rec.binary, rec.base)
    hist = History.from_columns(rec.ips, rec.times, rec.cycles, rec.flags)
    L, D, n = line_list(rec, lines), rec.depths, len(rec.ips)
    if optimised:
        assert sum(1 for f in rec.flags if f & F.CALL) == 10 and len(set(L)) > 4
    for over in (True, False):
        for p in range(n):
            pos, found = ref_prev_line(L, D, p, 0, over)
            assert hist.prev_line(p, lines, over_calls=over) == Step(pos, "found" if found else "start"), (p, over)
            pos, found = ref_next_line(L, D, p, n, over)
            assert hist.next_line(p, lines, over_calls=over) == Step(pos, "found" if found else "end"), (p, over)


@pytest.mark.live
def test_gaps_stop_stepping(rec, lines):
    square = rec.image.find_symbol("square")[0]
    entries = [p for p, ip in enumerate(rec.ips) if ip == square]
    gap = Gap(entries[4], 0x1234, square, ErrorCode.OVERFLOW, "overflow")
    h = History.from_columns(rec.ips, rec.times, rec.cycles, rec.flags, [gap])
    assert h.gap_at(gap.position) == gap and h.gap_at(gap.position + 1) is None
    assert h.gap_before(gap.position + 3) == gap and h.gap_before(gap.position - 1) is None
    assert h.gap_after(gap.position - 1) == gap and h.gap_after(gap.position) is None
    assert h.gaps_between(0, len(h) - 1) == [gap] == h.gaps_between(len(h) - 1, 0)
    assert h.prev_line(gap.position, lines) == Step(gap.position, "gap", gap)
    assert h.prev_at(len(h) - 1, [square]) == Step(entries[-1], "found")
    assert h.prev_at(entries[5], [square]) == Step(entries[4], "found")
    assert h.prev_at(entries[4] + 2, [square]) == Step(entries[4], "found")
    assert h.prev_at(entries[4], [square]) == Step(gap.position, "gap", gap)
    assert h.next_at(entries[2], [square]) == Step(entries[3], "found")
    assert h.next_at(entries[3], [square]) == Step(gap.position - 1, "gap", gap)
    L, D = line_list(rec, lines), rec.depths
    for p in range(gap.position, len(h)):
        pos, found = ref_prev_line(L, D, p, gap.position, True)
        assert h.prev_line(p, lines) == (Step(pos, "found") if found else Step(pos, "gap", gap))
    with pytest.raises(PtError) as err:
        History.from_columns(rec.ips, rec.times, rec.cycles, rec.flags, [Gap(len(h) + 1, 0, 0, 25, "x")])
    assert err.value.code == ErrorCode.INVALID


@pytest.mark.live
def test_breakpoint_addresses_backwards_and_forwards(rec, hist):
    square = rec.image.find_symbol("square")[0]
    entries = [p for p, ip in enumerate(rec.ips) if ip == square]
    assert len(entries) == 10
    found, p = [], len(hist) - 1
    while True:
        step = hist.prev_at(p, [square, 0xDEAD])
        if step.reason != "found":
            assert step == Step(0, "start")
            break
        found.append(step.position)
        p = step.position
    assert found == entries[::-1]
    assert hist.next_at(0, [square]) == Step(entries[0], "found")
    assert hist.next_at(entries[-1], [square]) == Step(len(hist) - 1, "end")


@pytest.mark.live
def test_position_at_time(rec, hist):
    T = rec.times
    rng = random.Random(5)
    probes = [T[0] - 1, T[0], T[-1], T[-1] + 1] + [rng.randrange(T[0], T[-1]) for _ in range(200)]
    for t in probes:
        le = [p for p in range(len(T)) if T[p] <= t]
        assert hist.position_at_time(t) == (le[-1] if le else None)
        ge = [p for p in range(len(T)) if T[p] >= t]
        assert hist.first_at_or_after_time(t) == (ge[0] if ge else None)


@pytest.mark.live
def test_line_column_and_symbols(rec, hist, lines):
    ids = hist.line_ids(lines)
    assert list(ids) == line_list(rec, lines)
    assert hist.line_of(0, lines) == (lines.lookup(rec.ips[0])[0], marker_line(SRC, "sum_entry"))
    assert hist.line_of(len(hist) - 1, lines)[1] == marker_line(SRC, "main_call")


def test_packing_handles_every_width_and_disorder():
    n = 5000
    rng = random.Random(11)
    times = array("Q", [7] * 1024)                                    # width 0
    times += array("Q", (1_000 + i // 3 for i in range(1024)))       # width 1
    times += array("Q", (50_000 + 40 * i for i in range(1024)))      # width 2
    times += array("Q", (rng.randrange(2**40) for _ in range(1024)))  # width 8, unordered
    times += array("Q", (2**64 - 1 - i for i in range(n - 4096)))      # descending, at the top
    ips = array("Q", (rng.choice((0x401000, 0x401004, 0x7FFF_FFFF_F000)) for _ in range(n)))
    flags = array("B", (rng.choice((0, 0, 0, F.CALL, F.RETURN)) for _ in range(n)))
    h = History.from_columns(ips, times, times, flags)
    assert h.times() == times and h.cycles_range(100, 4100) == times[100:4100] and h.ips() == ips
    assert [h.time(p) for p in range(0, n, 97)] == list(times[0:n:97])
    for t in (6, 7, 1_100, 2**39, 2**64 - 2, 2**64 - 1):
        above = [p for p in range(n) if times[p] > t]
        first = above[0] if above else n
        assert h.position_at_time(t) == (first - 1 if first else None)
    depth, expected = 0, []
    for f in flags:
        expected.append(depth)
        depth += (1 if f & F.CALL else 0) - (1 if f & F.RETURN else 0)
    assert [h.depth(p) for p in range(n)] == expected


def test_empty_history_and_bad_columns(tmp_path):
    h = History.from_columns(array("Q"), array("Q"), array("Q"), array("B"))
    assert len(h) == 0 and h.position_at_time(5) is None and h.ips() == array("Q")
    h.save(str(tmp_path / "empty.hist"))
    assert len(History.load(str(tmp_path / "empty.hist"))) == 0
    with pytest.raises(PtError) as err:
        History.from_columns(array("Q", [1, 2]), array("Q", [1]), array("Q", [1, 2]), array("B", [0, 0]))
    assert err.value.code == ErrorCode.INVALID and "ip 2, time 1" in str(err.value)
    with pytest.raises(PtError) as err:
        History.from_columns([1], [-1], [0], [0])
    assert err.value.code == ErrorCode.INVALID and "time" in str(err.value)
    with pytest.raises(PtError) as err:
        History.from_columns([1], [1], [0], [0], [], {"when": object()})
    assert err.value.code == ErrorCode.INVALID and "meta" in str(err.value)


@pytest.mark.live
def test_save_and_load(rec, hist, lines, tmp_path):
    path = str(tmp_path / "h.hist")
    gap = Gap(17, 99, 0x401000, ErrorCode.NOMAP, "no memory mapped at this address")
    h = History.from_columns(rec.ips, rec.times, rec.cycles, rec.flags, [gap], {"tid": 42, "cpu": "6/85"})
    h.save(path)
    back = History.load(path)
    assert back.ips() == rec.ips and back.times() == rec.times and back.cycles_range() == rec.cycles
    assert back.flags_range() == rec.flags and back.gaps == [gap] and back.meta == {"tid": 42, "cpu": "6/85"}
    assert back.prev_line(len(back) - 2, lines) == h.prev_line(len(h) - 2, lines)
    raw = pathlib.Path(path).read_bytes()
    bad = tmp_path / "bad.hist"
    for damaged, words in ((b"NOTAHIST" + raw[8:], "not a ptdebug history"),
                           (raw[:8] + (FORMAT_VERSION + 1).to_bytes(4, "little") + raw[12:], "format"),
                           (raw[:-5], "truncated")):
        bad.write_bytes(damaged)
        with pytest.raises(PtError) as err:
            History.load(str(bad))
        assert err.value.code == ErrorCode.BAD_FILE and words in str(err.value)
    with pytest.raises(PtError) as err:
        History.load(str(tmp_path / "absent.hist"))
    assert err.value.code == ErrorCode.BAD_FILE


def test_compact_with_every_index_built():
    """<= 16 bytes per instruction, indexes included (the issue's bound), on a
    200k-instruction history shaped like real code (see benchmarks/bench_history.py)."""
    from benchmarks.bench_history import realistic_columns

    ips, times, cycles, flags, table = realistic_columns(200_000, seed=3)
    h = History.from_columns(ips, times, cycles, flags)
    h.depth(100)
    h.line_id(100, table)
    h.line_id(100, table, statements=False)
    assert h.nbytes / len(h) <= 16


def test_builder_in_pieces_equals_one_shot():
    """Appending in uneven pieces across block boundaries gives the same history as
    from_columns, index for index."""
    from benchmarks.bench_history import realistic_columns

    ips, times, cycles, flags, table = realistic_columns(50_000, seed=9)
    whole = History.from_columns(ips, times, cycles, flags, [Gap(7, 1, 2, ErrorCode.OVERFLOW, "overflow")])
    builder = HistoryBuilder({"tid": 3})
    builder.BLOCK = 4096                      # many blocks (a multiple of the 1024 chunk)
    rng = random.Random(2)
    at, gap = 0, None
    while at < len(ips):
        step = rng.choice((1, 7, 1000, 4095, 4096, 9000))
        if gap is None and at + step > 7:
            builder.append(ips[at:7], times[at:7], cycles[at:7], flags[at:7])
            gap = builder.add_gap(offset=1, ip=2, code=ErrorCode.OVERFLOW)
            at = 7
            continue
        builder.append(ips[at: at + step], times[at: at + step], cycles[at: at + step], bytes(flags[at: at + step]))
        at += step
    built = builder.finish()
    assert gap == Gap(7, 1, 2, ErrorCode.OVERFLOW, "overflow") and built.gaps == whole.gaps
    assert built.ips() == ips and built.times() == times and built.cycles_range() == cycles
    assert built.flags_range() == flags and built.meta == {"tid": 3}
    assert list(built.distinct_ips) == list(whole.distinct_ips)
    for t in (times[0], times[12345], times[-1], times[40_000] + 1):
        assert built.position_at_time(t) == whole.position_at_time(t)
    for p in (5, 4095, 4096, 30_000, 49_999):
        assert built.prev_line(p, table) == whole.prev_line(p, table)
        assert built.depth(p) == whole.depth(p) and built.time(p) == times[p]
    with pytest.raises(PtError) as err:
        builder.finish()
    assert err.value.code == ErrorCode.INVALID and "finished" in str(err.value)
    with pytest.raises(PtError):
        builder.append([1], [1], [1], [0])


def ref_line_start(L, D, p):
    """The contract of History.line_start, spelled out over explicit lists: back over this
    frame's instructions (a callee's are deeper, the caller's shallower: the frame's entry)."""
    start = p
    for q in range(p - 1, -1, -1):
        if D[q] > D[p]:
            continue
        if D[q] < D[p] or (L[q] and L[q] != L[p]):
            break
        if L[q]:
            start = q
    return start


@pytest.mark.live
def test_line_start_matches_its_reference_at_every_position(rec, hist, lines):
    L = line_list(rec, lines)
    D = rec.depths
    assert [hist.line_start(p, lines) for p in range(len(L))] == [
        ref_line_start(L, D, p) for p in range(len(L))]
    # after square returns, the loop line's run starts before the call, not inside square
    call = next(p for p in range(len(L)) if rec.flags[p] & F.CALL)
    assert hist.line_start(call, lines) <= call and D[hist.line_start(call, lines)] == D[call]
