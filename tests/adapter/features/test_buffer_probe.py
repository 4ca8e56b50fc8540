"""features.buffer_probe: the probe expression evaluated here as the debuggee would, on real
objects, against addresses each library reports itself; and the choice of watched bytes."""
from __future__ import annotations

import array
import ctypes
import struct

import numpy as np
import pytest

from adapter.features.buffer_probe import (
    RANGE_GROUP,
    Buffer,
    NotAnExpression,
    child_expression,
    decode_value,
    probe_expression,
    watch_range,
)
from adapter.watchpoints import Access, WatchRequest, plan


def _probe(expression: str, scope: dict) -> Buffer:
    return Buffer.from_result(repr(eval(probe_expression(expression), scope)))


def _span(expression: str, scope: dict) -> tuple[int, int]:
    found = _probe(expression, scope)
    return found.address, found.nbytes


def test_numpy_whole_array_element_row_and_slice_are_views():
    kv = np.zeros((4, 8), dtype=np.float32)
    base = kv.ctypes.data
    scope = {"kv": kv}
    assert _span("kv", scope) == (base, 128)
    assert _span("kv[1, 2]", scope) == (base + (8 + 2) * 4, 4)
    assert _span("kv[1]", scope) == (base + 32, 32)
    assert _span("kv[1, 2:4]", scope) == (base + 40, 8)
    assert _probe("kv[1, 2]", scope).format == "np:<f4"
    with pytest.raises(ValueError, match="not contiguous"):
        _probe("kv[:, 0]", scope)


def test_buffer_protocol_objects_and_ctypes():
    buf = bytearray(b"hello world")
    ints = array.array("i", range(10))
    cells = (ctypes.c_double * 4)()
    scope = {"buf": buf, "ints": ints, "cells": cells, "view": memoryview(buf)}
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert _span("buf", scope) == (address, 11)
    assert _span("buf[3]", scope) == (address + 3, 1)
    assert _span("view[2:6]", scope) == (address + 2, 4)
    assert _span("ints[4]", scope) == (ints.buffer_info()[0] + 16, 4)
    assert _span("cells[2]", scope) == (ctypes.addressof(cells) + 16, 8)
    assert _probe("cells", scope).format == "d"
    with pytest.raises(ValueError, match="read-only"):
        _probe("b'abc'", {})
    with pytest.raises(TypeError):
        _probe("42", {})
    with pytest.raises(NotAnExpression):
        probe_expression("cache[")


@pytest.mark.parametrize("address, nbytes, expected", [
    (0x1000, 128, (0x1000, 32)),     # a big 8-aligned buffer: its first 32 bytes
    (0x1000, 20, (0x1000, 16)),
    (0x1000, 8, (0x1000, 8)),
    (0x1004, 4, (0x1004, 4)),        # a float32 element
    (0x1002, 4, (0x1002, 2)),
    (0x1003, 11, (0x1003, 1)),
])
def test_watch_range_always_fits_the_debug_registers(address, nbytes, expected):
    assert watch_range(address, nbytes) == expected
    start, length = expected
    plan(WatchRequest(start, length, Access.WRITE))  # the engine accepts it


def test_decode_value_by_element_type():
    assert decode_value(struct.pack("<d", 42.5), "d") == "42.5"
    assert decode_value(struct.pack("<2f", 1.0, 2.0), "f") == "[1.0, 2.0]"
    assert decode_value(b"\x01\x02", "") == "01 02"
    assert decode_value(None, "d") == "?"


class _Model:
    def __init__(self):
        self.coefs_ = [np.zeros((3, 4), dtype=np.float32), np.zeros(4, dtype=np.float32)]


def test_items_attributes_and_views_name_the_object_that_owns_the_memory():
    """Seen before: `state['w']` and `model.coefs_[0]` failed with `memoryview: a bytes-like
    object is required, not 'dict'`."""
    model, kv = _Model(), np.zeros((4, 8), dtype=np.int64)
    state = {"w": np.zeros(6), "layers": [kv]}
    buf = bytearray(8)
    scope = {"model": model, "state": state, "kv": kv, "buf": buf}
    coefs = _probe("model.coefs_[0]", scope)
    assert (coefs.address, coefs.nbytes) == (model.coefs_[0].ctypes.data, 48)
    assert coefs.owner == "model.coefs_[0]" and coefs.itemsize == 4
    assert _probe("state['w']", scope).owner == "state['w']"
    assert _span("state['layers'][0][2]", scope) == (kv.ctypes.data + 16 * 8, 64)
    assert _probe("state['layers'][0][2]", scope).owner == "kv"  # the shortest path
    flat = _probe("kv.reshape(-1)[3]", scope)  # a view: its memory is kv's
    assert flat.address == kv.ctypes.data + 24 and flat.owner == "view of kv"
    assert _probe("memoryview(buf)", scope).owner == "view of buf"


@pytest.mark.parametrize("expression", ["kv.astype('float32')", "kv + 0", "kv.copy()[1]",
                                        "np.zeros(4)", "bytearray(4)"])
def test_a_temporary_is_refused_as_one(expression):
    """Seen before: `kv.astype('float32')` was accepted and watched at a temporary that can
    never be written."""
    scope = {"kv": np.zeros((4, 8), dtype=np.int64), "np": np}
    with pytest.raises(ValueError, match="makes a new object"):
        _probe(expression, scope)


def test_the_owner_is_found_in_locals_as_well_as_globals():
    kv = np.zeros(4)
    found = eval(probe_expression("cache[1]"), {}, {"cache": kv})
    assert Buffer.from_result(repr(found)).owner == "cache"


@pytest.mark.parametrize("parent, parent_type, start, name, expected", [
    ("kv", "ndarray", 0, "2", "kv[2]"),            # a row under debugpy's "[0:4] " group
    ("kv[2]", "ndarray", 0, "05", "kv[2][5]"),     # zero-padded, as debugpy names them
    ("kv", "ndarray", 100, "3", "kv[103]"),        # a group that starts further in
    ("state", "dict", 0, "'w'", "state['w']"),     # a dict key shown as its repr
    ("model", "MLPClassifier", 0, "coefs_", "model.coefs_"),
    ("kv", "ndarray", 0, "min", None),             # a value debugpy computed
    ("kv", "ndarray", 0, "len()", None),
    (None, "", 0, "2", None),                      # a parent never seen expanded
])
def test_child_expression_names_what_debugpy_left_unnamed(parent, parent_type, start, name,
                                                          expected):
    assert child_expression(parent, parent_type, start, name) == expected
    assert RANGE_GROUP.match("[0:8]") and not RANGE_GROUP.match("len()")
