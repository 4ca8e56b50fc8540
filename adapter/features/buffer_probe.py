"""Where a Python object's bytes live: the expression ptdebug evaluates in the debuggee (through
debugpy's `evaluate`) to find the address and size of a buffer, and the choice of the bytes the
debug registers can watch.

Layer: features (helper of data_breakpoints). Pure functions; no I/O, no DAP.

The probe runs *inside the debuggee*, so it is sent as source text and must only use what the
debuggee has: numpy and torch are looked up in `sys.modules` (never imported by us), ctypes and
memoryview are in every CPython. An index (`cache[3]`, `kv[0, 5]`, `buf[4:12]`) is applied so
that the result is a *view* of the original memory, never a copy: numpy gets a trailing Ellipsis
(a full index with `...` returns a 0-d view, not a scalar), a memoryview gets a slice.
"""
from __future__ import annotations

import ast
import dataclasses
import struct

PROBE_SOURCE = '''
def probe(o, index, has_index):
    import ctypes, sys
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
        return (o.data_ptr(), o.element_size() * o.nelement(),
                "%s %s%s" % (kind, str(o.dtype).replace("torch.", ""), list(o.shape)), "", False)
    if np is not None and isinstance(o, np.ndarray):
        if has_index:
            o = o[(index if isinstance(index, tuple) else (index,)) + (Ellipsis,)]
        if not (o.flags.c_contiguous or o.flags.f_contiguous):
            raise ValueError("the array view is not contiguous")
        char = o.dtype.char if o.dtype.char in "bBhHiIlLqQefd?" else ""
        return (o.__array_interface__["data"][0], o.nbytes,
                "%s %s%s" % (kind, o.dtype, list(o.shape)), char, not o.flags.writeable)
    if isinstance(o, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure, ctypes.Union)):
        address, size = ctypes.addressof(o), ctypes.sizeof(o)
        char = getattr(o, "_type_", "")
        if isinstance(o, ctypes.Array):
            char = getattr(o._type_, "_type_", "")
        if has_index:
            if not isinstance(o, ctypes.Array) or not isinstance(index, int):
                raise ValueError("only a ctypes array takes an integer index")
            item = ctypes.sizeof(o._type_)
            address, size = address + (index % len(o)) * item, item
            char = getattr(o._type_, "_type_", "")
        return (address, size, kind, char if isinstance(char, str) and len(char) == 1 else "",
                False)
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
    char = m.format if m.format in "bBhHiIlLqQefd?c" and len(m.format) == 1 else ""
    return (ctypes.addressof(ctypes.c_char.from_buffer(m.cast("B"))), m.nbytes,
            "%s format %s" % (kind, m.format), char, False)
'''

MAX_WATCH = 32
"""Bytes the four x86 debug registers cover at most (4 x 8, SDM Vol. 3B §17.2.4)."""


class NotAnExpression(ValueError):
    """The name given is not a Python expression."""


def probe_expression(expression: str) -> str:
    """A Python expression that, evaluated in the debuggee's frame, gives
    (address, nbytes, description, struct format char or '', readonly) for `expression`.

    Raises NotAnExpression when `expression` does not parse."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise NotAnExpression(f"{expression!r} is not a Python expression: {exc.msg}") from None
    if isinstance(tree, ast.Subscript):
        base, index, has_index = ast.unparse(tree.value), _index_source(tree.slice), "True"
    else:
        base, index, has_index = ast.unparse(tree), "None", "False"
    return (f"(lambda ns, o, i: (exec({PROBE_SOURCE!r}, ns), ns['probe'](o, i, {has_index}))[1])"
            f"({{}}, {base}, {index})")


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
    """What the probe found: `nbytes` at `address`, a description, an element format."""
    address: int
    nbytes: int
    description: str
    format: str
    readonly: bool

    @classmethod
    def from_result(cls, result: str) -> Buffer:
        """Parse the probe's result as debugpy returns it (the repr of a tuple).

        Raises ValueError when it is not one."""
        value = ast.literal_eval(result)
        if not (isinstance(value, tuple) and len(value) == 5 and isinstance(value[0], int)
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


def decode_value(data: bytes | None, fmt: str) -> str:
    """Watched bytes shown as values of the buffer's element type when known, else as hex."""
    if data is None:
        return "?"
    if fmt and fmt != "c":
        size = struct.calcsize(fmt)
        if len(data) % size == 0:
            values = struct.unpack(f"<{len(data) // size}{fmt}", data)
            return repr(values[0]) if len(values) == 1 else repr(list(values))
    return data.hex(" ")
