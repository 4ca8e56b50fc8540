"""features.buffer_probe.decode_value: every numpy dtype, through the format the real probe
reports for a real array (the probe run here as the debuggee runs it), decodes to the values
numpy itself holds; buffer-protocol formats are native-sized; nothing makes it raise.

Seen before: an int64 array's format `'l'` was unpacked in standard sizes (4 bytes), the
`struct.error` killed the data-breakpoint poll thread and the session hung."""
from __future__ import annotations

import array
import ctypes

import numpy as np
import pytest

from adapter.features.buffer_probe import Buffer, decode_value, probe_expression

INTEGER_AND_FLOAT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                            "uint64", "float16", "float32", "float64"]


def _format_of(value) -> str:
    """The element format the probe reports for `value`, evaluated as in the debuggee."""
    found = Buffer.from_result(repr(eval(probe_expression("value"), {"value": value})))
    return found.format


@pytest.mark.parametrize("dtype", INTEGER_AND_FLOAT_DTYPES)
def test_integer_and_float_dtypes_show_numpys_values(dtype):
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else np.finfo(dtype)
    values = np.array([info.min, 1, info.max], dtype=dtype)
    shown = decode_value(values.tobytes(), _format_of(values))
    assert shown == "[" + ", ".join(repr(v) for v in values.tolist()) + "]"
    assert decode_value(values[1:2].tobytes(), _format_of(values)) == "1" if \
        values.dtype.kind in "iu" else "1.0"


def test_bool():
    values = np.array([True, False, True])
    assert decode_value(values.tobytes(), _format_of(values)) == "[True, False, True]"


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex(dtype):
    values = np.array([1.5 - 2j, -0.25 + 8j], dtype=dtype)
    assert decode_value(values.tobytes(), _format_of(values)) == "[(1.5-2j), (-0.25+8j)]"


@pytest.mark.parametrize("unit", ["D", "h", "m", "s", "ms", "us", "ns", "Y", "M", "W"])
def test_datetime64_as_numpy_prints_it(unit):
    values = np.array(["2024-03-05T06:07:08.123456789", "NaT"],
                      dtype="datetime64[ns]").astype(f"datetime64[{unit}]")
    expected = "[" + ", ".join(str(v) for v in values) + "]"
    assert decode_value(values.tobytes(), _format_of(values)) == expected


@pytest.mark.parametrize("unit", ["s", "ms", "ns", "D"])
def test_timedelta64(unit):
    values = np.array([5, -3, "NaT"], dtype=f"timedelta64[{unit}]")
    expected = "[" + ", ".join(str(v) for v in values) + "]"
    assert decode_value(values.tobytes(), _format_of(values)) == expected


def test_structured_dtype_is_hex_by_field_name():
    values = np.array([(1, 2.0), (-1, 0.5)], dtype=[("token", "<i4"), ("score", "<f8")])
    shown = decode_value(values[:1].tobytes(), _format_of(values))
    assert shown == "{token: 01 00 00 00, score: 00 00 00 00 00 00 00 40}"
    # 32 bytes watched of 16-byte items: two items, nothing left over
    assert decode_value(values.tobytes(), _format_of(values)).count("token") == 2


def test_strings_and_object_arrays():
    assert decode_value(np.array([b"ab"], dtype="S4").tobytes(), "np:|S4") == "b'ab'"
    assert decode_value(np.array(["hé"], dtype="U3").tobytes(), "np:<U3") == "hé"
    objects = np.array([None, 1], dtype=object)
    assert decode_value(objects.tobytes(), _format_of(objects)) == objects.tobytes().hex(" ")


def test_buffer_protocol_formats_are_native_sized():
    longs = array.array("l", [-5, 2 ** 40])
    assert _format_of(longs) == "l"
    assert decode_value(longs.tobytes(), "l") == f"[-5, {2 ** 40}]"
    assert decode_value(memoryview(np.arange(2, dtype=np.int64)).tobytes(),
                        memoryview(np.arange(2, dtype=np.int64)).format) == "[0, 1]"
    doubles = (ctypes.c_double * 2)(1.5, 2.5)
    assert decode_value(bytes(doubles), _format_of(doubles)) == "[1.5, 2.5]"
    assert decode_value(b"\x01\x00\x00\x00\x02", "<i") == "1 + 02"


@pytest.mark.parametrize("fmt", ["np:<x9", "np:nonsense", "T{<i:a:}", "np:<f3", "zz", "np:<V4{"])
def test_what_cannot_be_decoded_is_raw_bytes_never_an_exception(fmt):
    assert decode_value(b"\x01\x02\x03\x04", fmt) == "01 02 03 04"
    assert decode_value(None, fmt) == "?"
