"""Readable names of C++ and Rust symbols: the one helper every view that shows a function name
goes through (stack frames, the Processor Trace scope, disassembly, pprof, Perfetto, hot lines,
`ptdebug watch`).

Layer: pt_decoder (no adapter imports); knows symbol names only. The demangling is libstdc++'s
own `abi::__cxa_demangle` through the `cxxfilt` package (what c++filt, gdb and perf print), not
one of ours. Issue 33: a torch service's frames, pprof and Perfetto showed `_ZN3c1010impl...`
names hundreds of characters long.

- Itanium C++ names (`_Z...`, with GCC's clone suffixes such as `.isra.0`, `.cold`, and a
  symbol version such as `@GLIBCXX_3.4` kept as it is) become `ns::Class<T>::method(args)`.
- Rust's legacy names (`_ZN...17h<16 hex digits>E`, the default of stable rustc) are Itanium
  names too; the trailing `::h<hash>` that only tells builds apart is dropped and rustc's
  escapes for characters an Itanium identifier cannot hold (`$LT$`, `$u7b$`, `..`) are put
  back, as rustfilt does.
- Rust v0 names (`_R...`) are left as they are: __cxa_demangle does not read them.
- Anything else (C, Go, Python, `[vdso]` labels), and a name the demangler refuses, is returned
  unchanged; so is everything when libstdc++ cannot be loaded.

The mangled (linkage) name stays what symbol tables hold (`Symbol.name`), for lookups by name
and where a view shows it beside the readable one.
"""
from __future__ import annotations

import functools
import re

try:  # ctypes over libstdc++; a machine without it shows the mangled names
    import cxxfilt
except Exception:  # noqa: BLE001 - ImportError, or OSError/AttributeError from loading libstdc++
    cxxfilt = None

_RUST_LEGACY = re.compile(r"17h[0-9a-f]{16}E(?:\.[A-Za-z0-9_.]+)?$")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}(?=$| \[clone )")
_RUST_ESCAPE = re.compile(r"\$(SP|BP|RF|LT|GT|LP|RP|C|u[0-9a-f]{1,6})\$|\.\.")
_RUST_NAMED = {"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")",
               "C": ","}
"""rustc's legacy escapes (src/librustc_codegen_utils/symbol_names/legacy.rs)."""


def _rust_unescape(match: re.Match) -> str:
    code = match.group(1)
    if code is None:
        return "::"
    return _RUST_NAMED.get(code) or chr(int(code[1:], 16))


@functools.lru_cache(maxsize=1 << 16)
def demangle(name: str) -> str:
    """The readable form of symbol `name`, or `name` itself when it is not a mangled C++ or
    Rust (legacy) name or cannot be demangled."""
    if cxxfilt is None or not name.startswith("_Z"):
        return name
    base, at, version = name.partition("@")  # a symbol version (`@GLIBCXX_3.4`) stays as is
    try:
        text = cxxfilt.demangle(base)
    except Exception:  # noqa: BLE001 - cxxfilt.InvalidName, and anything ctypes raises
        return name
    if not text:
        return name
    if _RUST_LEGACY.search(base):
        text = _RUST_ESCAPE.sub(_rust_unescape, _RUST_HASH.sub("", text)).replace("::_$", "::$")
        text = text.replace("::_{", "::{")
    return text + at + version


def is_mangled(name: str) -> bool:
    """Whether `name` reads differently demangled (a view then shows both)."""
    return demangle(name) != name
