"""adapter.watchpoints policy without a process: how requests become registers, and the errors."""
from __future__ import annotations

import pytest

from adapter.watchpoints import (
    Access,
    Hit,
    RegisterSlots,
    Watch,
    WatchError,
    WatchRequest,
    one_per_store,
    plan,
)


@pytest.mark.parametrize("address,length,access,pieces", [
    (0x1000, 1, Access.WRITE, [(0x1000, 1)]),
    (0x1001, 1, Access.READ_WRITE, [(0x1001, 1)]),
    (0x1002, 2, Access.WRITE, [(0x1002, 2)]),
    (0x1004, 4, Access.WRITE, [(0x1004, 4)]),
    (0x1008, 8, Access.READ_WRITE, [(0x1008, 8)]),
    (0x1008, 16, Access.WRITE, [(0x1008, 8), (0x1010, 8)]),
    (0x1000, 24, Access.WRITE, [(0x1000, 8), (0x1008, 8), (0x1010, 8)]),
    (0x1000, 32, Access.READ_WRITE, [(0x1000, 8), (0x1008, 8), (0x1010, 8), (0x1018, 8)]),
    (0x401237, 1, Access.EXECUTE, [(0x401237, 1)]),
])
def test_plan_splits_into_registers(address, length, access, pieces):
    assert plan(WatchRequest(address, length, access)) == pieces


@pytest.mark.parametrize("address,length,access,code,message", [
    (0x1001, 2, Access.WRITE, "unaligned", "not aligned to 2 bytes"),
    (0x1004, 8, Access.WRITE, "unaligned", "not aligned to 8 bytes"),
    (0x1004, 16, Access.WRITE, "unaligned", "not 8-byte aligned"),
    (0x1000, 3, Access.WRITE, "bad_length", "length 3"),
    (0x1000, 12, Access.WRITE, "bad_length", "length 12"),
    (0x1000, 0, Access.WRITE, "bad_length", "length 0"),
    (0x1000, 40, Access.WRITE, "bad_length", "more than the 32 bytes"),
    (0x1000, 64, Access.READ_WRITE, "bad_length", "more than the 32 bytes"),
    (0x1000, 8, Access.EXECUTE, "bad_length", "one instruction"),
    (0x1000, 8, "r", "bad_access", "no read-only watchpoint"),
])
def test_plan_refuses(address, length, access, code, message):
    with pytest.raises(WatchError, match=message) as info:
        plan(WatchRequest(address, length, access))
    assert info.value.code == code


def test_register_slots_name_the_four_in_use_when_a_fifth_is_asked():
    slots = RegisterSlots()
    a = slots.reserve(WatchRequest(0x1000, 16, Access.WRITE), plan(WatchRequest(0x1000, 16)))
    b = slots.reserve(WatchRequest(0x2000, 8, Access.READ_WRITE), [(0x2000, 8)])
    c = slots.reserve(WatchRequest(0x401000, 1, Access.EXECUTE), [(0x401000, 1)])
    assert slots.in_use() == 4
    assert [(i, w.id) for i, w, _, _ in slots.slots()] == [(0, a.id), (1, a.id), (2, b.id), (3, c.id)]
    with pytest.raises(WatchError) as info:
        slots.reserve(WatchRequest(0x3000, 4, Access.WRITE), [(0x3000, 4)])
    assert info.value.code == "no_register"
    assert str(info.value) == (
        "w 0x3000+4 needs 1 debug register but only 0 of the four are free; in use: "
        "watch 1: w 0x1000+16 (2 registers); watch 2: rw 0x2000+8 (1 register); "
        "watch 3: x 0x401000+1 (1 register)")
    slots.release(b)
    d = slots.reserve(WatchRequest(0x3000, 4, Access.WRITE), [(0x3000, 4)])
    assert [(i, w.id) for i, w, _, _ in slots.slots()] == [(0, a.id), (1, a.id), (2, c.id), (3, d.id)]


def _hit(watch, tid: int, ip: int, time_ns: int, address: int) -> Hit:
    return Hit(watch, tid, 1, ip, time_ns, address, {}, (), None, None)


def test_one_store_over_four_registers_is_one_hit():
    """A 32-byte AVX store into a 32-byte watch: perf reports one sample per register (four,
    measured on numpy's `a += 1`, 11 us apart), one write; the same store again later, or
    another thread's, is another hit."""
    watch = Watch(1, WatchRequest(0x1000, 32), [(0x1000 + 8 * i, 8) for i in range(4)])
    store = [_hit(watch, 7, 0x7f00, 1_000_000 + 4000 * i, 0x1000 + 8 * i) for i in range(4)]
    other_thread = _hit(watch, 8, 0x7f00, 1_020_000, 0x1000)
    later = _hit(watch, 7, 0x7f00, 9_000_000, 0x1000)
    assert one_per_store(store + [other_thread, later]) == [store[0], other_thread, later]
