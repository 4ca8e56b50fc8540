# cython: language_level=3
"""Hot loops of the decoded history and of the line tables, in C.

Layer: pt_decoder, under history.py and lines.py (their only callers). Pure
array arithmetic over typed memoryviews of array.array columns; knows the
flag bits of insn_flags.py (mirrored below) and nothing else. Every argument
is checked once by the Python caller (STYLE.md: check at the edge), so these
loops run without bounds checks.
"""
from cpython cimport array as carray
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

from array import array

# Mirrors pt_decoder/insn_flags.py (CALL, RETURN).
cdef uint8_t F_CALL = 0x01
cdef uint8_t F_RETURN = 0x02
cdef uint32_t EMPTY = 0xFFFFFFFF
cdef uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL

cdef carray.array _U32 = array("I")
cdef carray.array _U64 = array("Q")
cdef carray.array _I32 = array("i")
cdef carray.array _U8 = array("B")


cdef inline carray.array _new(carray.array template, Py_ssize_t n):
    return carray.clone(template, n, False)


def lookup_sorted(const uint64_t[:] keys, const uint32_t[:] values, const uint64_t[:] queries):
    """For each query q: values[i] for the last i with keys[i] <= q, 0 if none.

    `keys` sorted ascending, as long as `values`. Returns array('I').
    """
    cdef Py_ssize_t n = queries.shape[0], m = keys.shape[0], i, lo, hi, mid
    cdef uint64_t q, prev_q = 0
    cdef uint32_t prev_v = 0
    cdef bint have_prev = False
    out = _new(_U32, n)
    cdef uint32_t[:] o = out
    for i in range(n):
        q = queries[i]
        if have_prev and q == prev_q:
            o[i] = prev_v
            continue
        lo = 0
        hi = m
        while lo < hi:  # upper bound
            mid = (lo + hi) >> 1
            if keys[mid] <= q:
                lo = mid + 1
            else:
                hi = mid
        prev_v = values[lo - 1] if lo > 0 else 0
        prev_q = q
        have_prev = True
        o[i] = prev_v
    return out


cdef class _IpHash:
    """Open-addressing map uint64 -> dense uint32 id (first-seen order)."""
    cdef uint64_t *keys
    cdef uint32_t *vals
    cdef uint64_t cap
    cdef int bits
    cdef uint32_t count

    def __cinit__(self):
        self.bits = 12
        self.cap = 1 << self.bits
        self.count = 0
        self._alloc()

    cdef _alloc(self):
        cdef uint64_t j
        self.keys = <uint64_t *> malloc(self.cap * 8)
        self.vals = <uint32_t *> malloc(self.cap * 4)
        if self.keys == NULL or self.vals == NULL:
            raise MemoryError()
        for j in range(self.cap):
            self.vals[j] = EMPTY

    def __dealloc__(self):
        free(self.keys)
        free(self.vals)

    cdef inline uint32_t get_or_add(self, uint64_t key) except? 0xFFFFFFFF:
        cdef uint64_t mask = self.cap - 1
        cdef uint64_t h = (key * GOLDEN) >> (64 - self.bits)
        while self.vals[h] != EMPTY:
            if self.keys[h] == key:
                return self.vals[h]
            h = (h + 1) & mask
        self.keys[h] = key
        self.vals[h] = self.count
        self.count += 1
        if self.count * 2 > self.cap:
            self._grow()
        return self.count - 1

    cdef _grow(self):
        cdef uint64_t *old_keys = self.keys
        cdef uint32_t *old_vals = self.vals
        cdef uint64_t old_cap = self.cap, j, h, mask
        self.bits += 1
        self.cap <<= 1
        self._alloc()
        mask = self.cap - 1
        for j in range(old_cap):
            if old_vals[j] != EMPTY:
                h = (old_keys[j] * GOLDEN) >> (64 - self.bits)
                while self.vals[h] != EMPTY:
                    h = (h + 1) & mask
                self.keys[h] = old_keys[j]
                self.vals[h] = old_vals[j]
        free(old_keys)
        free(old_vals)


cdef class IpInterner:
    """Gives each distinct IP a dense id as instructions arrive (first seen, first
    numbered); `sorted_table()` then gives the IPs ascending and the rank that
    renumbers first-seen ids into ascending-IP ids."""
    cdef _IpHash seen

    def __cinit__(self):
        self.seen = _IpHash()

    def __len__(self):
        return self.seen.count

    def add(self, const uint64_t[:] ips):
        """The first-seen id of every IP in `ips`, as array('I')."""
        cdef Py_ssize_t n = ips.shape[0], i
        cdef uint64_t last_ip = 0
        cdef uint32_t last_id = EMPTY
        ids = _new(_U32, n)
        cdef uint32_t[:] out = ids
        for i in range(n):
            if ips[i] != last_ip or last_id == EMPTY:
                last_ip = ips[i]
                last_id = self.seen.get_or_add(last_ip)
            out[i] = last_id
        return ids

    def sorted_table(self):
        """(table 'Q' ascending, rank 'I': rank[first-seen id] = index in table)."""
        cdef uint32_t count = self.seen.count
        cdef uint64_t j
        firsts = _new(_U64, count)
        cdef uint64_t[:] f = firsts
        for j in range(self.seen.cap):
            if self.seen.vals[j] != EMPTY:
                f[self.seen.vals[j]] = self.seen.keys[j]
        table = array("Q", sorted(firsts))
        cdef uint64_t[:] t = table
        rank = _new(_U32, count)
        cdef uint32_t[:] r = rank
        for j in range(count):
            r[self.seen.get_or_add(t[j])] = <uint32_t> j
        return table, rank


def renumber(uint32_t[:] ids, const uint32_t[:] rank):
    """ids[i] = rank[ids[i]] in place."""
    cdef Py_ssize_t i
    for i in range(ids.shape[0]):
        ids[i] = rank[ids[i]]


def pack_column(const uint64_t[:] values, int shift):
    """Chunked delta packing: per chunk of 2**shift values, a base (the minimum)
    and the smallest byte width (0, 1, 2, 4 or 8) holding every value - base.

    Returns (bases 'Q', widths 'B', offsets 'Q' (byte offset of each chunk,
    one more entry than chunks), data bytearray, prefix_max 'Q' (the running
    maximum up to each chunk's end: ascending even where values are not)).
    """
    cdef Py_ssize_t n = values.shape[0], nchunks = (n + (1 << shift) - 1) >> shift
    cdef Py_ssize_t c, i, lo, hi, k
    cdef uint64_t mn, mx, d, run_max = 0
    cdef int w
    bases = _new(_U64, nchunks)
    widths = _new(_U8, nchunks)
    offsets = _new(_U64, nchunks + 1)
    prefix = _new(_U64, nchunks)
    cdef uint64_t[:] b = bases, off = offsets, pm = prefix
    cdef uint8_t[:] wd = widths
    cdef uint64_t total = 0
    for c in range(nchunks):
        lo = c << shift
        hi = min(n, lo + (1 << shift))
        mn = values[lo]
        mx = values[lo]
        for i in range(lo + 1, hi):
            if values[i] < mn:
                mn = values[i]
            if values[i] > mx:
                mx = values[i]
        d = mx - mn
        w = 0 if d == 0 else 1 if d < 0x100 else 2 if d < 0x10000 else 4 if d < 0x100000000 else 8
        b[c] = mn
        wd[c] = w
        off[c] = total
        total += <uint64_t> w * (hi - lo)
        if c == 0 or mx > run_max:
            run_max = mx
        pm[c] = run_max
    off[nchunks] = total
    data = bytearray(total)
    cdef uint8_t[:] out = data
    cdef uint64_t pos, v
    for c in range(nchunks):
        w = wd[c]
        if w == 0:
            continue
        lo = c << shift
        hi = min(n, lo + (1 << shift))
        pos = off[c]
        for i in range(lo, hi):
            v = values[i] - b[c]
            for k in range(w):  # little-endian
                out[pos + k] = <uint8_t> (v >> (8 * k))
            pos += w
    return bases, widths, offsets, data, prefix


def unpack_column(const uint64_t[:] bases, const uint8_t[:] widths, const uint64_t[:] offsets,
                  const uint8_t[:] data, int shift, Py_ssize_t start, Py_ssize_t stop):
    """Values start..stop-1 of a packed column as array('Q'); the caller checks the range."""
    cdef Py_ssize_t i, c, k
    cdef uint64_t v, pos
    cdef int w
    out = _new(_U64, stop - start)
    cdef uint64_t[:] o = out
    for i in range(start, stop):
        c = i >> shift
        w = widths[c]
        v = 0
        if w:
            pos = offsets[c] + <uint64_t> w * (i - (c << shift))
            for k in range(w):
                v |= (<uint64_t> data[pos + k]) << (8 * k)
        o[i - start] = bases[c] + v
    return out


def call_return_events(const uint8_t[:] flags):
    """Every call and return instruction with the stack depth it executed at.

    Depth starts at 0 before the first instruction; a call raises the depth
    of the instructions after it by one, a return lowers it (it can go
    negative when the history starts inside a function). Returns (positions
    'I', depths 'i', kinds 'B' (the CALL/RETURN bits), by_depth 'I' (event
    indices grouped by depth, ascending depth then position), depth_starts
    'Q' (where each depth's group begins in by_depth; one more entry than
    depths), min_depth).
    """
    cdef Py_ssize_t n = flags.shape[0], i, count = 0, k
    cdef int32_t depth = 0, mn = 0, mx = 0
    cdef uint8_t f
    for i in range(n):
        if flags[i] & (F_CALL | F_RETURN):
            count += 1
    positions = _new(_U32, count)
    depths = _new(_I32, count)
    kinds = _new(_U8, count)
    cdef uint32_t[:] p = positions
    cdef int32_t[:] d = depths
    cdef uint8_t[:] kd = kinds
    k = 0
    for i in range(n):
        f = flags[i] & (F_CALL | F_RETURN)
        if f:
            p[k] = <uint32_t> i
            d[k] = depth
            kd[k] = f
            if depth < mn:
                mn = depth
            if depth > mx:
                mx = depth
            k += 1
            if f & F_CALL:
                depth += 1
            if f & F_RETURN:
                depth -= 1
    cdef Py_ssize_t ndepth = (mx - mn + 1) if count else 0
    starts = _new(_U64, ndepth + 1)
    cdef uint64_t[:] s = starts
    for i in range(ndepth + 1):
        s[i] = 0
    for k in range(count):
        s[d[k] - mn + 1] += 1
    for i in range(ndepth):
        s[i + 1] += s[i]
    by_depth = _new(_U32, count)
    cdef uint32_t[:] bd = by_depth
    fill = _new(_U64, ndepth)
    cdef uint64_t[:] fl = fill
    for i in range(ndepth):
        fl[i] = s[i]
    for k in range(count):
        bd[fl[d[k] - mn]] = <uint32_t> k
        fl[d[k] - mn] += 1
    return positions, depths, kinds, by_depth, starts, mn


def scan_line(const uint32_t[:] ip_ids, const uint8_t[:] flags, const uint32_t[:] line_of_ip,
              Py_ssize_t pos, Py_ssize_t bound, int forward, int over_calls):
    """Step by source line from `pos`, without crossing `bound`.

    Backward (`forward` 0; `bound` is the lowest position allowed): find the
    latest earlier instruction of another line (line id != 0) in this frame
    or an outer one (any frame unless `over_calls`), then the first
    instruction of that line's run in its frame. Leaving the current frame
    backwards (past its call) stops at the call instruction's run.
    Forward (`bound` is one past the highest allowed): the first later
    instruction of another line in this frame, or the first one after the
    frame returned.
    Returns (position, reached): `reached` 0 if the target was found, 1 if
    the scan hit `bound` first (position is then the bound instruction), 2
    (backward only) if the target line was found but its run reached back to
    `bound` (position is where it was followed to: the run may begin before).
    """
    cdef Py_ssize_t q, found = -1, accepted
    cdef int64_t rel = 0, found_rel
    cdef uint32_t here = line_of_ip[ip_ids[pos]], lid, target_line
    cdef uint8_t f
    if forward:
        q = pos + 1
        while q < bound:
            f = flags[q - 1]
            if f & F_CALL:
                rel += 1
            if f & F_RETURN:
                rel -= 1
            if rel < 0:
                return q, 0
            if rel == 0 or not over_calls:
                lid = line_of_ip[ip_ids[q]]
                if lid != 0 and lid != here:
                    return q, 0
            q += 1
        return bound - 1, 1
    q = pos - 1
    while q >= bound:
        f = flags[q]
        if f & F_CALL:
            rel -= 1
        if f & F_RETURN:
            rel += 1
        if rel < 0:
            found = q
            break
        if rel == 0 or not over_calls:
            lid = line_of_ip[ip_ids[q]]
            if lid != 0 and lid != here:
                found = q
                break
        q -= 1
    if found < 0:
        return bound, 1
    # Back to the start of the found instruction's line run in its frame.
    found_rel = rel
    target_line = line_of_ip[ip_ids[found]]
    accepted = found
    q = found - 1
    while q >= bound:
        f = flags[q]
        if f & F_CALL:
            rel -= 1
        if f & F_RETURN:
            rel += 1
        if rel < found_rel:
            break
        if rel > found_rel:
            if not over_calls:
                break
            q -= 1
            continue
        lid = line_of_ip[ip_ids[q]]
        if lid != target_line and lid != 0:
            break
        accepted = q
        q -= 1
    return accepted, (2 if q < bound else 0)


def scan_marked(const uint32_t[:] ip_ids, const uint8_t[:] marks, Py_ssize_t pos,
                Py_ssize_t bound, int forward):
    """The nearest position after (`forward`) or before `pos` whose IP id is marked
    (marks[id] != 0), not crossing `bound` (lowest allowed backward, one past the
    highest forward); -1 if none."""
    cdef Py_ssize_t q
    if forward:
        q = pos + 1
        while q < bound:
            if marks[ip_ids[q]]:
                return q
            q += 1
    else:
        q = pos - 1
        while q >= bound:
            if marks[ip_ids[q]]:
                return q
            q -= 1
    return -1


def gather(const uint32_t[:] table, const uint32_t[:] ids):
    """table[ids[i]] for every i, as array('I')."""
    cdef Py_ssize_t n = ids.shape[0], i
    out = _new(_U32, n)
    cdef uint32_t[:] o = out
    for i in range(n):
        o[i] = table[ids[i]]
    return out


def gather64(const uint64_t[:] table, const uint32_t[:] ids):
    """table[ids[i]] for every i, as array('Q')."""
    cdef Py_ssize_t n = ids.shape[0], i
    out = _new(_U64, n)
    cdef uint64_t[:] o = out
    for i in range(n):
        o[i] = table[ids[i]]
    return out


cdef inline uint64_t _uvarint(const uint8_t[:] buf, Py_ssize_t* off) except? 0xFFFFFFFFFFFFFFFF:
    """One little-endian base-128 unsigned varint at *off (Go's encoding/binary), *off
    advanced past it."""
    cdef uint64_t uv = 0, shift = 0
    cdef uint8_t b
    cdef Py_ssize_t n = buf.shape[0]
    while True:
        if off[0] >= n:
            raise ValueError("pc-value table runs past .gopclntab")
        b = buf[off[0]]
        off[0] += 1
        uv |= (<uint64_t> (b & 0x7F)) << shift
        if b < 0x80:
            return uv
        shift += 7


cdef Py_ssize_t _pcvalue(const uint8_t[:] buf, Py_ssize_t off, uint64_t entry, int quantum,
                         list pcs, list values) except -1:
    """Decode one Go pc-value table into `pcs`/`values` (change points; the last pc
    ends the table). Pairs of zig-zag value delta and pc delta in quanta, as
    uvarints, from value -1 at the entry; a zero value delta after the first
    pair ends it (Go's src/runtime/symtab.go, pcvalue/step)."""
    cdef uint64_t pc = entry, uv
    cdef int64_t value = -1
    cdef bint first = True
    while True:
        uv = _uvarint(buf, &off)
        if uv == 0 and not first:
            pcs.append(pc)
            values.append(value)
            return 0
        first = False
        if uv & 1:
            value += -<int64_t> (uv >> 1) - 1
        else:
            value += <int64_t> (uv >> 1)
        pcs.append(pc)
        values.append(value)
        uv = _uvarint(buf, &off)
        pc += uv * quantum


def go_function_rows(const uint8_t[:] pctab, Py_ssize_t pcfile, Py_ssize_t pcln,
                     uint64_t entry, int quantum):
    """The line rows of one Go function: (pcs, file numbers, lines) where either the
    file or the line changes, and the function's end pc (from its pc-value tables)."""
    lpcs, lvals, fpcs, fvals = [], [], [], []
    _pcvalue(pctab, pcln, entry, quantum, lpcs, lvals)
    _pcvalue(pctab, pcfile, entry, quantum, fpcs, fvals)
    cdef uint64_t end = max(<uint64_t> lpcs[len(lpcs) - 1], <uint64_t> fpcs[len(fpcs) - 1]), pc = entry, nxt
    cdef Py_ssize_t li = 0, fi = 0, nl = len(lpcs), nf = len(fpcs)
    pcs, fnos, lines = [], [], []
    while pc < end:
        while li + 1 < nl and <uint64_t> lpcs[li + 1] <= pc:
            li += 1
        while fi + 1 < nf and <uint64_t> fpcs[fi + 1] <= pc:
            fi += 1
        pcs.append(pc)
        fnos.append(fvals[fi])
        lines.append(lvals[li])
        nxt = end
        if li + 1 < nl and <uint64_t> lpcs[li + 1] < nxt:
            nxt = lpcs[li + 1]
        if fi + 1 < nf and <uint64_t> fpcs[fi + 1] < nxt:
            nxt = fpcs[fi + 1]
        pc = nxt
    return pcs, fnos, lines, end


def assign_line_ids(const uint64_t[:] address, const uint32_t[:] file_id, const uint32_t[:] line,
                    const uint8_t[:] flags, int is_stmt_bit, int end_bit):
    """Line ids of the rows of a sorted line table (see lines.LineTable).

    Returns (line_id 'I', stmt_line_id 'I', keys: list of (file id, line) with
    keys[id - 1] the pair of id; id 0 is "no line")."""
    cdef Py_ssize_t n = address.shape[0], i
    lid = _new(_U32, n)
    sid = _new(_U32, n)
    cdef uint32_t[:] l = lid, s = sid
    cdef dict ids = {}
    cdef list keys = []
    cdef uint32_t ident, current = 0
    cdef uint64_t stmt_at = 0
    cdef bint have_stmt = False
    cdef object key
    for i in range(n):
        if flags[i] & end_bit:
            l[i] = 0
            s[i] = 0
            current = 0
            have_stmt = False
            continue
        ident = 0
        if line[i]:
            key = (<uint64_t> file_id[i] << 32) | line[i]
            found = ids.get(key)
            if found is None:
                keys.append((file_id[i], line[i]))
                ident = len(keys)
                ids[key] = ident
            else:
                ident = found
        l[i] = ident
        if flags[i] & is_stmt_bit:
            current = ident
            stmt_at = address[i]
            have_stmt = True
            s[i] = ident
        elif (have_stmt and stmt_at == address[i]) or not current:
            # A statement begins at this very address; this row only says
            # which of its lines the instruction belongs to.
            s[i] = ident
        else:
            s[i] = current
    return lid, sid, keys
