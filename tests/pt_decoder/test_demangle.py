"""pt_decoder/demangle.py: C++ names read as c++filt (binutils) reads them, on every symbol of a
real C++ program built here; Rust legacy names without their hash; anything else unchanged."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from cxx_fixture import build_cxx_service

from pt_decoder.demangle import demangle


def test_every_cxx_symbol_of_a_real_program_reads_as_cxxfilt_reads_it(tmp_path):
    if shutil.which("c++filt") is None or shutil.which("nm") is None:
        pytest.fail("binutils is missing: scripts/bootstrap.sh installs build-essential")
    program, library = build_cxx_service(tmp_path)
    names = sorted({line.split()[-1] for path in (program, library) for line in
                    subprocess.run(["nm", str(path)], capture_output=True, text=True,
                                   check=True).stdout.splitlines()
                    if line.split() and line.split()[-1].startswith("_Z")})
    assert len(names) > 40
    expected = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True,
                              text=True, check=True).stdout.splitlines()
    assert [demangle(n) for n in names] == expected
    longest = max(names, key=len)
    assert len(longest) > 100 and "std::" in demangle(longest)
    assert demangle("_ZN5infer7kernels11AccumulatorIlE3addERKSt6vectorIlSaIlEE") == \
        "infer::kernels::Accumulator<long>::add(std::vector<long, std::allocator<long> > const&)"


@pytest.mark.parametrize("mangled, readable", [
    ("_ZN4core3fmt9Formatter3pad17h1d8b4e5a9c1f2b3aE", "core::fmt::Formatter::pad"),
    ("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE",
     "std::rt::lang_start::{{closure}}"),
    ("_Z3fooi.isra.0", "foo(int) [clone .isra.0]"),
    # not mangled, or not readable by __cxa_demangle: unchanged
    ("main", "main"), ("serve", "serve"), ("_ZN3foo", "_ZN3foo"), ("", ""),
    ("main.checksum", "main.checksum"), ("_RNvCs15kBYyAo9fc_7mycrate7example",
                                         "_RNvCs15kBYyAo9fc_7mycrate7example"),
])
def test_rust_legacy_names_lose_their_hash_and_others_stay(mangled, readable):
    assert demangle(mangled) == readable
