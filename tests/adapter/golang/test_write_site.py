"""adapter/golang/write_site.py's decoding: the instruction that ends at the pc a write watch
trapped at, decoded from the function's entry (hand-assembled x86-64, Intel SDM Vol. 2)."""
from __future__ import annotations

from adapter.golang.write_site import _instruction_before

ENTRY = 0x401000
# mov %rax,0x10(%rsp) (48 89 44 24 10); mov %rcx,0x0(%rip) (48 89 0d 00 00 00 00);
# mov 0x0(%rip),%rdx (48 8b 15 00 00 00 00); rep stos %rax,%es:(%rdi) (f3 48 ab); ret (c3)
CODE = bytes.fromhex("4889442410" "48890d00000000" "488b1500000000" "f348ab" "c3")
STORE = ENTRY + 5
LOAD = ENTRY + 12
REP = ENTRY + 19


def test_the_instruction_ending_at_the_pc_is_the_writer():
    assert _instruction_before(CODE, ENTRY, LOAD) == STORE
    assert _instruction_before(CODE, ENTRY, STORE) == ENTRY


def test_a_repeated_string_instruction_at_the_pc_is_the_writer():
    # it traps between iterations with the pc still on itself
    assert _instruction_before(CODE, ENTRY, REP) == REP


def test_a_pc_inside_an_instruction_or_beyond_the_code_has_no_writer():
    assert _instruction_before(CODE, ENTRY, LOAD + 2) is None
    assert _instruction_before(CODE, ENTRY, ENTRY + 100) is None
