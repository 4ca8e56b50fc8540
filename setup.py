"""Build hook: compiles every Cython module of pt_decoder (pt_decoder/*.pyx and the tools'
compiled writers, pt_decoder/tools/*.pyx), and the fast
relay of the adapter (adapter/protocol/_fastrelay.pyx over fastrelay_core.c and fastrelay_json.c).

Globbing keeps the list in one place: a new layer is a new .pyx file and
nothing else. Compiler directives favour the hot loops (no bounds or
wraparound checks: every index is checked once at the edge, see STYLE.md).
"""
import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
OPTIMIZE = os.environ.get("PTDEBUG_BUILD_OPTIMIZE")
"""An optimisation flag (-O0 .. -O3) in place of the modules' own, for a build whose speed
matters more than the code's: the packaging test builds its wheel with -O0 (the C of
packet.pyx and insn.pyx is some 45,000 lines each). Published wheels use the defaults."""
if OPTIMIZE is not None and OPTIMIZE not in ("-O0", "-O1", "-O2", "-O3"):
    raise SystemExit(f"PTDEBUG_BUILD_OPTIMIZE must be one of -O0 -O1 -O2 -O3, not {OPTIMIZE!r}")


def _extensions():
    exts = []
    pyxs = glob.glob(os.path.join("pt_decoder", "*.pyx")) + glob.glob(os.path.join("pt_decoder", "tools", "*.pyx"))
    for pyx in sorted(pyxs):
        name = pyx[:-4].replace(os.sep, ".")
        exts.append(Extension(name, [pyx], extra_compile_args=[OPTIMIZE or "-O3"]))
    exts.append(Extension("adapter.protocol._fastrelay",
                          ["adapter/protocol/_fastrelay.pyx", "adapter/protocol/fastrelay_core.c",
                           "adapter/protocol/fastrelay_json.c"],
                          extra_compile_args=[OPTIMIZE or "-O2", "-pthread"],
                          extra_link_args=["-pthread"]))
    return cythonize(
        exts,
        nthreads=os.cpu_count() or 1,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )


class ParallelBuildExt(build_ext):
    """Compiles the extensions on every core unless told otherwise (`-j N`): a `pip install`
    from the sdist builds ~45k lines of C per module for packet.c and insn.c."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1


setup(ext_modules=_extensions(), cmdclass={"build_ext": ParallelBuildExt})
