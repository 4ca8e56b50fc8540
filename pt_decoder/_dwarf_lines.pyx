# cython: language_level=3, boundscheck=False, wraparound=False
"""The DWARF line-number program state machine (DWARF 5 spec §6.2.5; v2-v4 are the same
machine) in C, over the raw bytes of .debug_line.

Layer: pt_decoder, under lines.py, which parses the program headers (file and directory
tables) and calls `run_line_program` once per unit. pyelftools' LineProgram does the same work
object by object: 627k rows of pyenv's libpython took it 49 s, which every export and every
line step of a Python capture waited for.

Rows come out as columns (address, file number, line, column, flags), with flags
IS_STMT = 1 and END_SEQUENCE = 2 as in lines.py. A row is emitted where the spec appends one
to the matrix: a special opcode, DW_LNS_copy, DW_LNE_end_sequence. Unknown standard opcodes
are skipped by their operand count (standard_opcode_lengths), unknown extended ones by their
length, as the spec asks of a consumer.
"""
from array import array

from cpython cimport array as carray
from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef enum:
    IS_STMT = 1
    END_SEQUENCE = 2


class LineProgramError(ValueError):
    """The program runs past its unit or uses an operand size this reader has no way to skip."""


cdef inline uint64_t _leb(const uint8_t[:] data, Py_ssize_t *pos, Py_ssize_t end,
                          int *bits) except? 0xFFFFFFFFFFFFFFFF:
    """A LEB128's low 64 bits; `bits` gets how many bits it had (7 a byte)."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t byte
    while True:
        if pos[0] >= end:
            raise LineProgramError("a LEB128 operand runs past the end of the line program")
        byte = data[pos[0]]
        pos[0] += 1
        if shift < 64:
            value |= (<uint64_t>(byte & 0x7F)) << shift
        shift += 7
        if not byte & 0x80:
            bits[0] = shift
            return value


cdef inline uint64_t _uleb(const uint8_t[:] data, Py_ssize_t *pos, Py_ssize_t end) except? 0xFFFFFFFFFFFFFFFF:
    cdef int bits
    return _leb(data, pos, end, &bits)


cdef inline int64_t _sleb(const uint8_t[:] data, Py_ssize_t *pos, Py_ssize_t end) except? -0x7FFFFFFFFFFFFFFF:
    cdef int bits
    cdef uint64_t value = _leb(data, pos, end, &bits)
    if bits < 64 and (value >> (bits - 1)) & 1:  # the sign bit of the last byte
        value |= ~(<uint64_t>0) << bits
    return <int64_t>value


cdef inline uint64_t _fixed(const uint8_t[:] data, Py_ssize_t pos, int size):
    cdef uint64_t value = 0
    cdef int i
    for i in range(size):
        value |= (<uint64_t>data[pos + i]) << (8 * i)
    return value


def run_line_program(const uint8_t[:] data, Py_ssize_t start, Py_ssize_t end, *,
                     int address_size, int minimum_instruction_length,
                     int maximum_operations_per_instruction, bint default_is_stmt,
                     int line_base, int line_range, int opcode_base,
                     const uint8_t[:] standard_opcode_lengths, uint64_t bias,
                     const unsigned int[:] file_ids, int first_file):
    """Run one unit's program, data[start:end]; returns five arrays (address 'Q' with `bias`
    added, file id 'I', line 'I', column 'I', flags 'B'). The program's file number n is
    file_ids[n - first_file], 0 outside it. Raises LineProgramError on a program that runs
    past `end`."""
    cdef carray.array addresses = array("Q")
    cdef carray.array files = array("I")
    cdef carray.array lines = array("I")
    cdef carray.array columns = array("I")
    cdef carray.array flags = array("B")
    cdef Py_ssize_t pos = start, operand_end
    cdef uint64_t address = 0, operand, advance
    cdef uint64_t file = 1, column = 0, op_index = 0
    cdef int64_t line = 1
    cdef bint is_stmt = default_is_stmt
    cdef int opcode, adjusted, ex_opcode, i, max_ops = maximum_operations_per_instruction
    cdef uint64_t length
    if end > data.shape[0]:
        raise LineProgramError(f"the line program ends at {end}, past the section's "
                               f"{data.shape[0]} bytes")
    if line_range == 0:
        raise LineProgramError("line_range is 0")
    if max_ops <= 0:
        max_ops = 1
    if address_size not in (4, 8):
        raise LineProgramError(f"address size {address_size} is not 4 or 8")
    while pos < end:
        opcode = data[pos]
        pos += 1
        if opcode >= opcode_base:
            adjusted = opcode - opcode_base
            advance = adjusted // line_range
            address += minimum_instruction_length * ((op_index + advance) // max_ops)
            op_index = (op_index + advance) % max_ops
            line += line_base + adjusted % line_range
            _append(addresses, files, lines, columns, flags, address + bias,
                    _file_id(file_ids, file, first_file), line, column, IS_STMT if is_stmt else 0)
        elif opcode == 0:  # extended: 0, ULEB length, sub-opcode, operands
            length = _uleb(data, &pos, end)
            if length == 0:
                continue
            if <uint64_t>(end - pos) < length:
                raise LineProgramError("an extended opcode runs past the end of the line program")
            operand_end = pos + <Py_ssize_t>length
            ex_opcode = data[pos]
            pos += 1
            if ex_opcode == 1:  # DW_LNE_end_sequence
                _append(addresses, files, lines, columns, flags, address + bias,
                        _file_id(file_ids, file, first_file), line, column, END_SEQUENCE)
                address = 0
                file = 1
                line = 1
                column = 0
                op_index = 0
                is_stmt = default_is_stmt
            elif ex_opcode == 2:  # DW_LNE_set_address
                if length - 1 >= <uint64_t>address_size:
                    address = _fixed(data, pos, address_size)
                op_index = 0
            # DW_LNE_define_file (3, v2-v4 only, unused by any compiler in a decade),
            # DW_LNE_set_discriminator (4) and vendor opcodes change nothing a row holds here
            pos = operand_end
        elif opcode == 1:  # DW_LNS_copy
            _append(addresses, files, lines, columns, flags, address + bias,
                    _file_id(file_ids, file, first_file), line, column, IS_STMT if is_stmt else 0)
        elif opcode == 2:  # DW_LNS_advance_pc
            advance = _uleb(data, &pos, end)
            address += minimum_instruction_length * ((op_index + advance) // max_ops)
            op_index = (op_index + advance) % max_ops
        elif opcode == 3:  # DW_LNS_advance_line
            line += _sleb(data, &pos, end)
        elif opcode == 4:  # DW_LNS_set_file
            file = _uleb(data, &pos, end)
        elif opcode == 5:  # DW_LNS_set_column
            column = _uleb(data, &pos, end)
        elif opcode == 6:  # DW_LNS_negate_stmt
            is_stmt = not is_stmt
        elif opcode == 8:  # DW_LNS_const_add_pc: the address advance of special opcode 255
            advance = (255 - opcode_base) // line_range
            address += minimum_instruction_length * ((op_index + advance) // max_ops)
            op_index = (op_index + advance) % max_ops
        elif opcode == 9:  # DW_LNS_fixed_advance_pc: a uhalf, no scaling
            if end - pos < 2:
                raise LineProgramError("DW_LNS_fixed_advance_pc runs past the end of the line program")
            address += _fixed(data, pos, 2)
            op_index = 0
            pos += 2
        elif opcode in (7, 10, 11):  # basic_block, prologue_end, epilogue_begin: no operand
            pass
        else:  # DW_LNS_set_isa (12) and opcodes this reader does not know: skip the ULEBs
            if opcode - 1 >= standard_opcode_lengths.shape[0]:
                raise LineProgramError(f"standard opcode {opcode} has no operand count")
            for i in range(standard_opcode_lengths[opcode - 1]):
                _uleb(data, &pos, end)
    return addresses, files, lines, columns, flags


cdef inline unsigned int _file_id(const unsigned int[:] file_ids, uint64_t file, int first_file):
    if file < <uint64_t>first_file or file - first_file >= <uint64_t>file_ids.shape[0]:
        return 0
    return file_ids[file - first_file]


cdef inline void _append(carray.array addresses, carray.array files, carray.array lines,
                         carray.array columns, carray.array flags, uint64_t address,
                         uint64_t file, int64_t line, uint64_t column, int flag):
    carray.resize_smart(addresses, len(addresses) + 1)
    addresses.data.as_ulonglongs[len(addresses) - 1] = address
    carray.resize_smart(files, len(files) + 1)
    files.data.as_uints[len(files) - 1] = <unsigned int>file
    carray.resize_smart(lines, len(lines) + 1)
    lines.data.as_uints[len(lines) - 1] = <unsigned int>line if 0 <= line <= 0xFFFFFFFF else 0
    carray.resize_smart(columns, len(columns) + 1)
    columns.data.as_uints[len(columns) - 1] = <unsigned int>column
    carray.resize_smart(flags, len(flags) + 1)
    flags.data.as_uchars[len(flags) - 1] = <unsigned char>flag


def in_address_order(const unsigned long long[:] address, const unsigned char[:] flags):
    """Whether rows are sorted by address with end rows first among equal addresses (the
    order LineTable keeps)."""
    cdef Py_ssize_t i
    for i in range(1, address.shape[0]):
        if address[i] < address[i - 1]:
            return False
        if (address[i] == address[i - 1] and flags[i] & END_SEQUENCE
                and not flags[i - 1] & END_SEQUENCE):
            return False
    return True
