"""C++ names are demangled wherever a capture's functions are shown (issue 33: frames, pprof,
Perfetto and hot lines showed `_ZN...` names hundreds of characters long): a real recording
of the C++ fixture (templates, a lambda, a constructor in a shared library), exported to pprof
(name demangled, system_name the linkage name) and Perfetto, and its hot lines' call targets.
(A call through the PLT is named `_init` by every view: the stubs have no symbol, and the
size-0 `_init` before them is taken to run up to the next symbol; not a naming question.)"""
from __future__ import annotations

import gzip
import json
import pathlib

import pytest
from cxx_fixture import PROGRAMS, build_cxx_service, ptdebug

from adapter.export import protowire

pytestmark = pytest.mark.timeout(240)

ADD = "infer::kernels::Accumulator<long>::add(std::vector<long, std::allocator<long> > const&)"
ADD_MANGLED = "_ZN5infer7kernels11AccumulatorIlE3addERKSt6vectorIlSaIlEE"
SCORE = "infer::score(std::vector<long, std::allocator<long> > const&)"


@pytest.fixture(scope="module")
def cxx_bundle(tmp_path_factory) -> pathlib.Path:
    work = tmp_path_factory.mktemp("cxx")
    program, _ = build_cxx_service(work / "bin")
    bundle = work / "cxx.bundle"
    ptdebug("record", "--backend", "stepper", "--from", "serve", "--until-return", "-o",
            str(bundle), "--", str(program), "2")
    return bundle


def test_pprof_names_functions_demangled_with_the_linkage_name_beside(cxx_bundle, tmp_path):
    out = tmp_path / "cxx.pb.gz"
    ptdebug("export", "pprof", str(cxx_bundle), "-o", str(out))
    profile = list(protowire.fields(gzip.decompress(out.read_bytes())))
    strings = [v.decode() for f, _, v in profile if f == 6]
    functions = [{f: v for f, _, v in protowire.fields(v)} for f, _, v in profile if f == 5]
    names = {strings[fn[2]]: strings[fn[3]] for fn in functions}
    assert names[ADD] == ADD_MANGLED, sorted(names)
    assert SCORE in names and "serve" in names
    assert not [n for n in names if n.startswith("_Z")], names


def test_perfetto_slices_carry_demangled_names(cxx_bundle, tmp_path):
    out = tmp_path / "cxx.json"
    ptdebug("export", "perfetto", str(cxx_bundle), "-o", str(out))
    slices = {e.get("name") for e in json.loads(out.read_text())["traceEvents"]}
    assert "long infer::kernels::reduce<long, infer::score(std::vector<long, std::allocator" \
        "<long> > const&)::{lambda(long)#1}>(std::vector<long, std::allocator<long> > const&, " \
        "infer::score(std::vector<long, std::allocator<long> > const&)::{lambda(long)#1})" \
        in slices, sorted(n for n in slices if n)
    assert "std::vector<long, std::allocator<long> >::push_back(long&&)" in slices
    assert not [n for n in slices if n and n.startswith("_Z")]


def test_hot_lines_name_the_functions_a_line_calls_demangled(cxx_bundle):
    from adapter.lsp.hotlines import HotLines
    from adapter.recording.recording import Recording
    hot = HotLines.from_decoded(Recording.open(cxx_bundle))
    lines = hot.for_path(str(PROGRAMS / "cxx_service.cpp"))
    marked = next(n for n, text in enumerate((PROGRAMS / "cxx_service.cpp").read_text()
                                            .splitlines(), 1) if text.endswith("// @push"))
    assert lines[marked].calls == {"std::vector<long, std::allocator<long> >::push_back(long&&)":
                                   8}, lines[marked].calls  # one request: 8 values
