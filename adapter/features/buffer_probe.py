"""Where a Python object's bytes live: the expression ptdebug evaluates in the debuggee (through
debugpy's `evaluate`) to find the address and size of a buffer, and the choice of the bytes the
debug registers can watch.

Layer: features (helper of data_breakpoints). Pure functions; no I/O, no DAP.

The probe runs *inside the debuggee*, so it is sent as source text and must only use what the
debuggee has: numpy and torch are looked up in `sys.modules` (never imported by us), ctypes and
memoryview are in every CPython. An index (`cache[3]`, `kv[0, 5]`, `buf[4:12]`) is applied so
that the result is a *view* of the original memory, never a copy: numpy gets a trailing Ellipsis
(a full index with `...` returns a 0-d view, not a scalar), a memoryview gets a slice. The item
of a dict, list or tuple (`state['w']`, `model.coefs_[0]`) is the object itself.

A child the Variables view shows without an evaluateName (debugpy's numpy items '02' under a
range group "[0:8] ") is named from its parent's expression (child_expression).

Only memory that outlives the evaluation is watched: the probe looks for the object it names
(or the end of its base chain: a numpy view's `base`, a memoryview's `obj`) among the frame's
variables, their items and attributes (owner_path, 4 levels, 20000 objects at most). A copy
(`kv.astype('float32')`, `kv + 0`) is found nowhere and refused with a message saying so; what is
found is named in the description (`memory of model.coefs_[0]`).
"""
from __future__ import annotations

import ast
import dataclasses
import datetime
import re
import struct

PROBE_SOURCE = '''
def owner_path(named, spaces, depth_limit=4, budget=20000):
    # The objects whose memory `named` is: itself, then its base chain (a numpy view's base,
    # a torch view's _base, a memoryview's obj, a ctypes object's _b_base_).
    chain, cur = [named], named
    for _ in range(64):
        nxt = None
        for attr in ("base", "_base", "obj", "_b_base_"):
            try:
                nxt = getattr(cur, attr, None)
            except Exception:
                nxt = None
            if nxt is not None and not isinstance(nxt, (int, float, str, bytes, type)):
                break
            nxt = None
        if nxt is None or any(nxt is c for c in chain):
            break
        chain.append(nxt)
        cur = nxt
    wanted = {id(c): k for k, c in enumerate(chain)}
    import types
    skip = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, str, bytes,
            int, float, complex, bool, type(None))
    seen, level = set(), []
    for space in spaces:
        for name, value in list(space.items()):
            if not name.startswith("__"):
                level.append((value, name))
    for depth in range(depth_limit):
        following = []
        for value, path in level:
            if id(value) in seen:
                continue
            seen.add(id(value))
            if id(value) in wanted:
                return path, wanted[id(value)]
            budget -= 1
            if budget <= 0:
                return None
            if isinstance(value, skip) or (isinstance(value, types.ModuleType) and depth):
                continue
            if isinstance(value, dict):
                items = [(v, "%s[%r]" % (path, k)) for k, v in list(value.items())[:2000]]
            elif isinstance(value, (list, tuple)):
                items = [(v, "%s[%d]" % (path, k)) for k, v in enumerate(value[:2000])]
            else:
                attrs = getattr(value, "__dict__", None)
                if not isinstance(attrs, dict):
                    continue
                items = [(v, "%s.%s" % (path, k)) for k, v in list(attrs.items())[:2000]
                         if not k.startswith("__")]
            following.extend(items)
        level = following
    return None

def owned(named, spaces, result):
    # A buffer that no variable of the frame reaches (through names, items, attributes and
    # the base chain) belongs to a temporary the evaluation made: nobody will ever write it.
    found = owner_path(named, spaces)
    if found is None:
        raise ValueError("the expression makes a new object (a copy such as astype() or "
                         "arithmetic, or a new array) that no variable of the frame holds: "
                         "its memory is freed after the evaluation and never written; watch "
                         "the object it was computed from")
    path, hops = found
    return result + (("view of " if hops else "") + path,)

def probe(o, index, has_index, spaces):
    import ctypes, sys
    if has_index and isinstance(o, (dict, list, tuple)):
        o, has_index = o[index], False  # an item of a container: the object itself
    named = o
    kind = type(o).__module__ + "." + type(o).__qualname__
    kind = kind.replace("builtins.", "")
    np = sys.modules.get("numpy")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(o, torch.Tensor):
        if has_index:
            o = o[index]
        if o.device.type != "cpu":
            raise ValueError("a %s tensor is in device memory, which CPU debug registers "
                             "cannot watch" % o.device.type)
        if not o.is_contiguous():
            raise ValueError("the tensor view is not contiguous")
        kinds = {"bool": "b", "uint8": "u", "int8": "i", "int16": "i", "int32": "i",
                 "int64": "i", "float16": "f", "float32": "f", "float64": "f",
                 "complex64": "c", "complex128": "c"}
        name = str(o.dtype).replace("torch.", "")
        char = ("np:<%s%d" % (kinds[name], o.element_size())) if name in kinds else ""
        return owned(named, spaces, (o.data_ptr(), o.element_size() * o.nelement(),
                     "%s %s%s" % (kind, name, list(o.shape)), char, False, o.element_size()))
    if np is not None and isinstance(o, np.ndarray):
        if has_index:
            o = o[(index if isinstance(index, tuple) else (index,)) + (Ellipsis,)]
        if not (o.flags.c_contiguous or o.flags.f_contiguous):
            raise ValueError("the array view is not contiguous")
        if o.dtype.names:
            char = "np:|V%d{%s}" % (o.dtype.itemsize, ",".join(
                "%s:%d:%d" % (name, o.dtype.fields[name][1], o.dtype.fields[name][0].itemsize)
                for name in o.dtype.names))
        else:
            char = "np:" + o.dtype.str
        return owned(named, spaces, (o.__array_interface__["data"][0], o.nbytes,
                     "%s %s%s" % (kind, o.dtype, list(o.shape)), char, not o.flags.writeable,
                     o.dtype.itemsize))
    if isinstance(o, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure, ctypes.Union)):
        address, size = ctypes.addressof(o), ctypes.sizeof(o)
        char = getattr(o, "_type_", "")
        item = size
        if isinstance(o, ctypes.Array):
            char = getattr(o._type_, "_type_", "")
            item = ctypes.sizeof(o._type_)
        if has_index:
            if not isinstance(o, ctypes.Array) or not isinstance(index, int):
                raise ValueError("only a ctypes array takes an integer index")
            address, size = address + (index % len(o)) * item, item
            char = getattr(o._type_, "_type_", "")
        return owned(named, spaces, (address, size, kind, char if isinstance(char, str)
                     and len(char) == 1 and char in "bBhHiIlLqQfd?" else "", False, item))
    m = memoryview(o)
    if has_index:
        if isinstance(index, int):
            index = slice(index, index + 1 if index != -1 else None)
        m = m[index]
    if not m.contiguous:
        raise ValueError("the buffer is not contiguous")
    if m.readonly:
        raise ValueError("a read-only %s cannot change" % kind)
    if m.nbytes == 0:
        raise ValueError("the buffer is empty")
    char = m.format if len(m.format.lstrip("@=<>!")) == 1 else ""
    return owned(named, spaces, (ctypes.addressof(ctypes.c_char.from_buffer(m.cast("B"))),
                 m.nbytes, "%s format %s" % (kind, m.format), char, False, m.itemsize))
'''

RANGE_GROUP = re.compile(r"^\[(\d+):(\d+)\]$")
NUMPY_SUMMARY = {"min", "max", "shape", "dtype", "size"}
"""Children debugpy adds to a numpy array: values it computed, not memory of the program."""


def child_expression(parent: str | None, parent_type: str, start: int, name: str) -> str | None:
    """The expression of a child that debugpy gave no evaluateName: an index (`'02'` -> the
    parent's [start + 2]), a dict key shown as its repr, or an attribute name."""
    if parent is None:
        return None
    if name.isdigit():
        return f"{parent}[{start + int(name)}]"
    if parent_type == "ndarray" and name in NUMPY_SUMMARY:
        return None
    try:
        key = ast.literal_eval(name)
    except (ValueError, SyntaxError):
        key = None
    if isinstance(key, (str, bytes, int, float, tuple)) and key is not None:
        return f"{parent}[{name}]"
    if name.isidentifier():
        return f"{parent}.{name}"
    return None


MAX_WATCH = 32
"""Bytes the four x86 debug registers cover at most (4 x 8, SDM Vol. 3B §17.2.4)."""


class NotAnExpression(ValueError):
    """The name given is not a Python expression."""


def probe_expression(expression: str) -> str:
    """A Python expression that, evaluated in the debuggee's frame, gives
    (address, nbytes, description, struct format char or '', readonly, item size, owner path)
    for `expression`, or raises there (ValueError) for memory nobody will write: read-only,
    not contiguous, or a temporary that no variable of the frame reaches.

    Raises NotAnExpression when `expression` does not parse."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise NotAnExpression(f"{expression!r} is not a Python expression: {exc.msg}") from None
    if isinstance(tree, ast.Subscript):
        base, index, has_index = ast.unparse(tree.value), _index_source(tree.slice), "True"
    else:
        base, index, has_index = ast.unparse(tree), "None", "False"
    # locals() and globals() at the top of the evaluated expression are the frame's
    # namespaces: the roots from which the watched memory must be reachable (owner_path).
    return (f"(lambda ns, o, i, s: (exec({PROBE_SOURCE!r}, ns), "
            f"ns['probe'](o, i, {has_index}, s))[1])({{}}, {base}, {index}, "
            f"(locals(), globals()))")


def _index_source(node: ast.AST) -> str:
    """Source of an index as a value: `1:3` (only valid inside []) becomes `slice(1, 3, None)`."""
    if isinstance(node, ast.Slice):
        parts = [ast.unparse(p) if p is not None else "None"
                 for p in (node.lower, node.upper, node.step)]
        return f"slice({', '.join(parts)})"
    if isinstance(node, ast.Tuple):
        return "(" + "".join(_index_source(e) + ", " for e in node.elts) + ")"
    return ast.unparse(node)


@dataclasses.dataclass(frozen=True)
class Buffer:
    """What the probe found: `nbytes` at `address`, a description, an element format, the
    element size, and the path from a variable of the frame to the object owning the memory
    (`kv`, `model.coefs_[0]`, `view of state['kv']`)."""
    address: int
    nbytes: int
    description: str
    format: str
    readonly: bool
    itemsize: int = 0
    owner: str = ""

    @classmethod
    def from_result(cls, result: str) -> Buffer:
        """Parse the probe's result as debugpy returns it (the repr of a tuple).

        Raises ValueError when it is not one."""
        value = ast.literal_eval(result)
        if not (isinstance(value, tuple) and len(value) in (5, 7) and isinstance(value[0], int)
                and isinstance(value[1], int)):
            raise ValueError(f"unexpected probe result {result[:100]!r}")
        return cls(*value)


def watch_range(address: int, nbytes: int) -> tuple[int, int]:
    """(address, length) of the bytes to watch from the start of a buffer: the whole buffer
    when the debug registers can cover it, else its first bytes that they can.

    Lengths are 1, 2, 4 or 8 naturally aligned, or 16/24/32 at an 8-aligned address
    (watchpoints.plan's rules). Raises ValueError for an empty buffer."""
    if nbytes <= 0:
        raise ValueError("nothing to watch: the buffer is empty")
    if address % 8 == 0 and nbytes >= 8:
        return address, min(MAX_WATCH, nbytes - nbytes % 8)
    for size in (8, 4, 2, 1):
        if size <= nbytes and address % size == 0:
            return address, size
    raise AssertionError("unreachable: size 1 always fits")


def describe_watch(expression: str, buffer: Buffer, length: int) -> str:
    """Which bytes of which object a watch covers: `kv[2]: numpy.ndarray int64[8] (memory of
    kv), bytes 0..32 of 64 (elements 0..3) at 0x...`."""
    owner = f" (memory of {buffer.owner})" if buffer.owner and buffer.owner != expression else ""
    if length >= buffer.nbytes:
        where = f"all {buffer.nbytes} bytes"
    else:
        items = (f" (elements 0..{length // buffer.itemsize - 1})"
                 if buffer.itemsize and length % buffer.itemsize == 0
                 and length >= buffer.itemsize else "")
        where = (f"bytes 0..{length} of {buffer.nbytes}{items}; the debug registers cover at "
                 f"most {MAX_WATCH}: name an element such as {expression}[i] to watch another "
                 "part")
    return f"{expression}: {buffer.description}{owner}, {where} at {buffer.address:#x}"


def decode_value(data: bytes | None, fmt: str) -> str:
    """Watched bytes shown as values of the buffer's element type, else as hex.

    `fmt` is what the probe found: a buffer-protocol format (`struct` syntax, native sizes and
    alignment unless it starts with one of `=<>!`: `'l'` is 8 bytes natively, 4 in standard
    mode), `np:` and a numpy dtype string (`np:<i8`, `np:<M8[ns]`, `np:|b1`; a structured dtype
    as `np:|V{itemsize}{name:offset:size,...}`), or "" for raw bytes. Never raises: bytes that
    do not decode are shown as hex, bytes past the last whole element are appended as hex."""
    if data is None:
        return "?"
    try:
        if fmt.startswith("np:"):
            values, size = _numpy_values(data, fmt[3:])
        elif fmt and fmt != "c":
            prefix = "" if fmt[0] in "@=<>!" else "@"
            size = struct.calcsize(prefix + fmt)
            whole = len(data) - len(data) % size
            values = [v[0] for v in struct.iter_unpack(prefix + fmt, data[:whole])]
        else:
            return data.hex(" ")
    except Exception:  # noqa: BLE001 - any format the debuggee reports must not end a hit
        return data.hex(" ")
    if not values:
        return data.hex(" ")
    text = _show(values[0]) if len(values) == 1 else "[" + ", ".join(map(_show, values)) + "]"
    rest = data[len(values) * size:]
    return text + (f" + {rest.hex(' ')}" if rest else "")


def _show(value) -> str:
    return value if isinstance(value, str) else repr(value)


_NUMPY_DTYPE = re.compile(r"^([<>|=])([a-zA-Z])(\d+)(?:\[(\w+)\])?(?:\{(.*)\})?$")
_FLOAT = {2: "e", 4: "f", 8: "d"}
_TIME_UNITS = {"D": 86_400_000_000, "h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000,
               "ms": 1_000, "us": 1}
"""Microseconds per numpy datetime64 unit that Python's datetime can show exactly."""
_TIMEDELTA_NAMES = {"Y": "years", "M": "months", "W": "weeks", "D": "days", "h": "hours",
                    "m": "minutes", "s": "seconds", "ms": "milliseconds",
                    "us": "microseconds", "ns": "nanoseconds", "ps": "picoseconds",
                    "fs": "femtoseconds", "as": "attoseconds"}
NAT = -(1 << 63)
"""numpy's NaT (not a time) in datetime64/timedelta64."""


def _numpy_values(data: bytes, dtype: str) -> tuple[list, int]:
    """(values, item size) of `data` as the numpy dtype string `dtype` (see decode_value)."""
    match = _NUMPY_DTYPE.match(dtype)
    if match is None:
        raise ValueError(f"unknown dtype {dtype!r}")
    order_char, kind, size_text, unit, fields = match.groups()
    size = int(size_text) * (4 if kind == "U" else 1)  # a U dtype counts UCS-4 characters
    order = "big" if order_char == ">" else "little"
    prefix = ">" if order == "big" else "<"
    items = [data[i:i + size] for i in range(0, len(data) - size + 1, size)]
    if kind == "b":
        return [bool(item[0]) for item in items], size
    if kind in "iu":
        return [int.from_bytes(item, order, signed=kind == "i") for item in items], size
    if kind == "f":
        return [struct.unpack(prefix + _FLOAT[size], item)[0] for item in items], size
    if kind == "c":
        half = _FLOAT[size // 2]
        return [complex(*struct.unpack(prefix + 2 * half, item)) for item in items], size
    if kind in "Mm":
        ticks = [int.from_bytes(item, order, signed=True) for item in items]
        show = _datetime if kind == "M" else _timedelta
        return [show(t, unit or "generic") for t in ticks], size
    if kind == "S":
        return [bytes(item.rstrip(b"\0")) for item in items], size
    if kind == "U":
        return [item.decode("utf-32-le" if order == "little" else "utf-32-be").rstrip("\0")
                for item in items], size
    if kind == "V" and fields:
        layout = [(name, int(offset), int(length)) for name, offset, length
                  in (field.rsplit(":", 2) for field in fields.split(","))]
        return ["{" + ", ".join(f"{name}: {item[offset:offset + length].hex(' ')}"
                                for name, offset, length in layout) + "}"
                for item in items], size
    raise ValueError(f"dtype {dtype!r} is shown as raw bytes")


def _datetime(ticks: int, unit: str) -> str:
    """A datetime64 value as numpy prints it (ISO 8601, to its unit)."""
    if ticks == NAT:
        return "NaT"
    if unit == "Y":
        return str(1970 + ticks)
    if unit == "M":
        return f"{1970 + ticks // 12}-{ticks % 12 + 1:02d}"
    if unit == "W":
        unit, ticks = "D", ticks * 7
    if unit == "ns":
        micro, nanos = divmod(ticks, 1000)
        return _datetime(micro, "us") + f"{nanos:03d}"
    if unit not in _TIME_UNITS:
        return f"{ticks} {unit} since 1970-01-01"
    when = _EPOCH + datetime.timedelta(microseconds=ticks * _TIME_UNITS[unit])
    if unit == "D":
        return when.date().isoformat()
    spec = {"h": "hours", "m": "minutes", "s": "seconds", "ms": "milliseconds"}
    return when.isoformat(timespec=spec.get(unit, "microseconds"))


def _timedelta(ticks: int, unit: str) -> str:
    """A timedelta64 value as numpy prints it (`5 seconds`)."""
    if ticks == NAT:
        return "NaT"
    return f"{ticks} {_TIMEDELTA_NAMES.get(unit, unit)}"


_EPOCH = datetime.datetime(1970, 1, 1)
