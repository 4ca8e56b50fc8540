"""`ptdebug export pprof`: a decoded bundle as a gzipped pprof profile (profile.proto),
whose samples are the recorded call stacks weighted by cycles and instructions.

Layer: adapter.export. Reads a Recording (adapter.recording); writes google/pprof's
proto/profile.proto message through protowire.py. Knows nothing of DAP.

Sample types: `cycles` and `instructions` (count), cycles the default; for a stepper
recording `instructions` first and the default, then `stepper_ns` (nanoseconds): the stepper's
"cycles" are wall-clock ns of a ptrace-slowed thread, not CPU time (trace.py), and the profile's
comment says so (`go tool pprof -comments`).

Every instruction of the history is one observation: its cycles (trace.py's attribution
rule) and a count of 1, on the call stack the decoded calls and returns say it ran under.
Observations with the same thread, stack and address are summed into one Sample; so
`go tool pprof -top` gives, per function, exactly the bundle's cycles spent in it (flat)
and under it (cum). Call stacks start at the recorded window: frames entered before the
window opened are unknown, and a return past the first frame keeps the stack empty.

A Python capture (the manifest's "python" table, the recorder's Python frame samples in the
PTWRITE packets: pt_decoder/python_frames.py) gets the Python call stack each instruction ran
under (function and line of every frame, the callers' lines being their calls) as the outer
part of its stack, with the native frames recorded under it (as `py-spy --native` merges
them): `go tool pprof -top -cum` lists the Python functions with everything they cost, their
Python callees and native code included. Python frames have no address: their locations have
address 0 and no mapping.
"""
from __future__ import annotations

import bisect
import datetime
import gzip
import os

import numpy as np

from adapter.recording.recording import STEPPER_CYCLES_NAME, Recording
from pt_decoder import insn_flags

from .protowire import LEN, Message, key, varint

SAMPLE_LOCATIONS, SAMPLE_VALUES, SAMPLE_LABEL = key(1, LEN), key(2, LEN), key(3, LEN)
"""The keys of profile.proto's Sample fields location_id, value (both packed) and label."""
SAMPLE_TYPES = (("cycles", "count"), ("instructions", "count"))
STEPPER_SAMPLE_TYPES = (("instructions", "count"), (STEPPER_CYCLES_NAME, "nanoseconds"))
"""A stepper recording's: the exact measure first (trace.py says why)."""


def sample_types(decoded: Recording) -> tuple[tuple[str, str], ...]:
    """The (type, unit) of each value of a sample, in order; the first is the default."""
    return STEPPER_SAMPLE_TYPES if decoded.stepper else SAMPLE_TYPES


class _Strings:
    """profile.proto's string table: index 0 is the empty string."""

    def __init__(self) -> None:
        self.table = [""]
        self.index = {"": 0}

    def __call__(self, text: str) -> int:
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.table)
            self.table.append(text)
        return found


class PythonLocations:
    """The Python (function, line) frames of a Python capture's stacks: stack_samples writes
    frame k as the negative number -(k + 1) in a stack; `function_key` names it."""

    def __init__(self, decoded: Recording):
        from pt_decoder.python_frames import CodeInfo
        self.decoded = decoded
        self.table = decoded.python_table
        self.codes = {}
        if self.table is not None:
            self.codes = {int(ident): CodeInfo.from_json(c)
                          for ident, c in (self.table.get("codes") or {}).items()}
        self.frames: list[tuple[int, int]] = []
        """(code id, line) of each element."""
        self._ids: dict[tuple[int, int], int] = {}

    def __bool__(self) -> bool:
        return self.table is not None

    def _element(self, code: int, index: int) -> int:
        info = self.codes.get(code)
        key = (code, info.line(index) if info else 0)
        ident = self._ids.get(key)
        if ident is None:
            ident = self._ids[key] = len(self.frames)
            self.frames.append(key)
        return -(ident + 1)

    def per_instruction(self, thread, length: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """The Python part of every instruction's stack, innermost first: (an id per
        instruction, int64; the stack of each id, () for none)."""
        frames = self.decoded.python_frames(thread)
        out = np.zeros(length, dtype=np.int64)
        stacks: list[tuple[int, ...]] = [()]
        ids: dict[tuple[int, ...], int] = {(): 0}
        segments = list(frames.stacks())
        for k, (start, stack) in enumerate(segments):
            stop = segments[k + 1][0] if k + 1 < len(segments) else length
            elements = tuple(self._element(code, index) for code, index in reversed(stack))
            ident = ids.get(elements)
            if ident is None:
                ident = ids[elements] = len(stacks)
                stacks.append(elements)
            out[start:stop] = ident
        return out, stacks

    def function_key(self, element: int) -> tuple[str, str, int, int]:
        """(name, file, first line, line) of stack element `element` (< 0)."""
        code, line = self.frames[-element - 1]
        info = self.codes.get(code)
        if info is None:
            return "[python frame not recorded]", "", 0, 0
        return info.qualname, info.filename, info.firstlineno, line


def stack_samples(decoded: Recording,
                  python: PythonLocations | None = None) -> dict[tuple[int, tuple[int, ...]], list[int]]:
    """{(tid, (leaf ip, caller call-site ip, ...)): [cycles, instructions]} of the bundle.

    Call sites are the addresses of the call instructions, innermost first. With `python`
    (a Python capture), the Python frames of each instruction end its stack (negative
    numbers, innermost first: PythonLocations).

    The call stack is a trie of nodes (node id -> parent id, call-site ip; 0 is the root),
    walked in Python at the calls and returns only; each instruction's node, and the sums per
    (node, ip, Python stack), are numpy's: 10^7 instructions took minutes one by one.
    """
    samples: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for thread in decoded.threads:
        history = thread.history
        n = len(history)
        if not n:
            continue
        ips = np.frombuffer(history.ips(), dtype=np.uint64)
        flags = np.frombuffer(history.flags_range(), dtype=np.uint8)
        weights = np.frombuffer(thread.cycle_weights(), dtype=np.uint64)
        parents: list[tuple[int, int]] = [(0, 0)]
        children: dict[tuple[int, int], int] = {}
        # where the node changes: (first position it holds for, node)
        starts, nodes = [0], [0]
        gaps = {g.position for g in history.gaps if 0 < g.position < n}
        transfers = ((flags & (insn_flags.CALL | insn_flags.RETURN)) != 0) & \
            ((flags & insn_flags.FAR) == 0)
        positions = sorted(gaps.union(np.flatnonzero(transfers).tolist()))
        node = 0
        for p in positions:
            if p in gaps:
                node = 0  # what ran across a gap is unknown: the stack starts again
                starts.append(p)
                nodes.append(0)
            f = int(flags[p])
            if not f & (insn_flags.CALL | insn_flags.RETURN) or f & insn_flags.FAR:
                continue
            if f & insn_flags.CALL:
                ip = int(ips[p])
                child = children.get((node, ip))
                if child is None:
                    child = children[(node, ip)] = len(parents)
                    parents.append((node, ip))
                node = child
            elif node:  # a return
                node = parents[node][0]
            else:
                continue
            starts.append(p + 1)  # the call or return itself ran in the node before
            nodes.append(node)
        node_of = np.asarray(nodes, dtype=np.int64)[
            np.searchsorted(np.asarray(starts, dtype=np.int64), np.arange(n), side="right") - 1]
        if python:
            py_of, py_stacks = python.per_instruction(thread, n)
            order = np.lexsort((ips, node_of, py_of))
        else:
            py_of, py_stacks = None, [()]
            order = np.lexsort((ips, node_of))
        keys = [node_of[order], ips[order]] + ([py_of[order]] if py_of is not None else [])
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for column in keys:
            change[1:] |= column[1:] != column[:-1]
        first = np.flatnonzero(change)
        cycles = np.add.reduceat(weights[order], first)
        counts = np.diff(np.append(first, n))
        # in the order the stacks first ran (the sort is stable: a group's first element is
        # its first instruction), as the profile lists them
        ran = np.argsort(order[first], kind="stable")
        first, cycles, counts = first[ran], cycles[ran], counts[ran]
        chains: dict[int, tuple[int, ...]] = {0: ()}
        leaf_nodes = keys[0][first].tolist()
        leaf_ips = keys[1][first].tolist()
        leaf_py = keys[2][first].tolist() if py_of is not None else [0] * len(first)
        for leaf, ip, py, c, count in zip(leaf_nodes, leaf_ips, leaf_py, cycles.tolist(),
                                          counts.tolist(), strict=True):
            stack = (ip, *_call_sites(leaf, parents, chains), *py_stacks[py])
            cell = samples.setdefault((thread.tid, stack), [0, 0])
            cell[0] += c
            cell[1] += count
    return samples


def _call_sites(leaf: int, parents: list[tuple[int, int]],
                chains: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    """The call sites of trie node `leaf`, innermost first; `chains` keeps them per node."""
    path = []
    node = leaf
    while node not in chains:
        path.append(node)
        node = parents[node][0]
    for missing in reversed(path):  # outermost first: each extends its parent's
        parent, call_site = parents[missing]
        chains[missing] = (call_site, *chains[parent])
    return chains[leaf]


def build_profile(decoded: Recording) -> bytes:
    """The serialized (not yet gzipped) profile.proto Profile message."""
    strings = _Strings()
    profile = Message()
    types = sample_types(decoded)
    for type_, unit in types:
        profile.message(1, Message().int(1, strings(type_)).int(2, strings(unit)))
    stepper = decoded.stepper

    mappings = _mappings(decoded)
    starts = [m[0] for m in mappings]
    for mapping_id, (start, limit, offset, path, build_id) in enumerate(mappings, 1):
        profile.message(3, Message().int(1, mapping_id).int(2, start).int(3, limit)
                        .int(4, offset).int(5, strings(path)).int(6, strings(build_id or ""))
                        .int(7, 1).int(8, 1).int(9, 1))

    locations: dict[int, int] = {}
    functions: dict[tuple[str, str], int] = {}
    function_messages: list[Message] = []
    location_messages: list[Message] = []

    python = PythonLocations(decoded)

    def python_location_id(element: int) -> int:
        name, file, first, line = python.function_key(element)
        fkey = (name, file)
        function_id = functions.get(fkey)
        if function_id is None:
            function_id = functions[fkey] = len(functions) + 1
            function_messages.append(Message().int(1, function_id).int(2, strings(name))
                                     .int(3, strings(f"py:{name}")).int(4, strings(file))
                                     .int(5, first))
        found = locations[element] = len(locations) + 1
        location = Message().int(1, found)
        location.message(4, Message().int(1, function_id).int(2, line))
        location_messages.append(location)
        return found

    def location_id(ip: int) -> int:
        found = locations.get(ip)
        if found is not None:
            return found
        if ip < 0:
            return python_location_id(ip)
        name, _entry = decoded.function(ip)
        line = decoded.line(ip)
        file = line[0] if line else ""
        fkey = (name, file)
        function_id = functions.get(fkey)
        if function_id is None:
            function_id = functions[fkey] = len(functions) + 1
            # Function.name: demangled; system_name: the linkage (mangled) name
            system = decoded.linkage_name(ip) or name
            function_messages.append(Message().int(1, function_id).int(2, strings(name))
                                     .int(3, strings(system)).int(4, strings(file)))
        found = locations[ip] = len(locations) + 1
        location = Message().int(1, found).int(2, _mapping_of(mappings, ip, starts)).int(3, ip)
        location.message(4, Message().int(1, function_id).int(2, line[1] if line else 0))
        location_messages.append(location)
        return found

    class EncodedIds(dict):
        """stack element -> the varint of its location id, made on first sight: a stack is
        then the join of its elements' bytes (a Python capture has some 800,000 samples a
        million instructions, each a dozen elements deep)."""

        def __missing__(self, element: int) -> bytes:
            found = self[element] = varint(location_id(element))
            return found

    encoded = EncodedIds()
    tid_key = strings("thread")
    labels: dict[int, bytes] = {}
    # in the order the stacks first ran (deterministic: the decode's order)
    for (tid, stack), (cycles, count) in stack_samples(decoded, python or None).items():
        values = [count, cycles] if stepper else [cycles, count]
        label = labels.get(tid)
        if label is None:
            label = labels[tid] = Message().int(1, tid_key).int(3, tid, keep_zero=True).bytes()
        # Sample{location_id: packed, value: packed, label}, written out here: some 800,000
        # of them a million instructions of a Python capture, a Message each took seconds
        ids = b"".join(map(encoded.__getitem__, stack))
        numbers = varint(values[0]) + varint(values[1])
        profile.bytes_field(2, b"".join((SAMPLE_LOCATIONS, varint(len(ids)), ids,
                                         SAMPLE_VALUES, varint(len(numbers)), numbers,
                                         SAMPLE_LABEL, varint(len(label)), label)))
    for location in location_messages:
        profile.message(4, location)
    for function in function_messages:
        profile.message(5, function)
    note = decoded.timing_note()
    comment = strings(note) if note else 0
    for text in strings.table:
        profile.string(6, text)
    created = _created_ns(decoded.manifest.get("created"))
    if created:
        profile.int(9, created)
    profile.int(10, _duration_ns(decoded))
    default, unit = types[0]
    profile.message(11, Message().int(1, strings.index[default]).int(2, strings.index[unit]))
    profile.int(12, 1)
    if comment:
        profile.int(13, comment)
    profile.int(14, strings.index[default])
    return profile.bytes()


def samples_items(decoded: Recording):
    return stack_samples(decoded).items()


def write_pprof(decoded: Recording, path: str | os.PathLike) -> int:
    """Write the gzipped profile to `path`; returns its size in bytes."""
    data = gzip.compress(build_profile(decoded), mtime=0)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def _mappings(decoded: Recording) -> list[tuple[int, int, int, str, str | None]]:
    out = []
    for image in decoded.manifest.get("images", []):
        start = image["load_address"]
        out.append((start, start + image.get("size", 0), image.get("offset", 0),
                    image.get("path") or image.get("file", ""), image.get("build_id")))
    return sorted(out)


def _mapping_of(mappings, ip: int, starts: list[int] | None = None) -> int:
    """The id (1-based) of the mapping holding `ip`, 0 for none. `starts`: the mappings'
    starts, for a binary search (images do not overlap; where they would, the scan decides)."""
    if starts is not None:
        k = bisect.bisect_right(starts, ip) - 1
        if k >= 0 and ip < mappings[k][1]:
            return k + 1
    for index, (start, limit, _, _, _) in enumerate(mappings, 1):
        if start <= ip < limit:
            return index
    return 0


def _duration_ns(decoded: Recording) -> int:
    spans = [(decoded.times_ns(t)[0], decoded.times_ns(t)[-1])
             for t in decoded.threads if len(t.history)]
    if not spans:
        return 0
    return max(e for _, e in spans) - min(s for s, _ in spans)


def _created_ns(text: str | None) -> int:
    if not text:
        return 0
    try:
        when = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return 0
    return int(when.replace(tzinfo=datetime.timezone.utc).timestamp()) * 1_000_000_000
