"""Build the Cython kernels of skseq.

Every ``skseq/_kernels/*.pyx`` file becomes the extension module
``skseq._kernels.<name>``.  Set ``SKSEQ_DEBUG_KERNELS=1`` to compile with bounds
and wrap-around checks switched on (slow; for hunting memory errors).

Every build also leaves the compiled kernels in the source tree (as
``build_ext --inplace`` does), even for a regular ``pip install .``: Python
puts the current directory first on ``sys.path``, so any command run from the
root of a checkout (``python -m skseq demo``, ``python -m sphinx ...``)
imports ``./skseq`` rather than the installed copy, and that source tree must
then be complete.
"""

import os
import platform
import sys
from pathlib import Path

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("SKSEQ_DEBUG_KERNELS", "") == "1"

COMPILER_DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
}

# -O3 lets GCC vectorise the inner loops over states and channels; no
# -ffast-math (the kernels rely on IEEE inf/NaN) and no -march=native (built
# wheels must run on other machines).  -fno-math-errno only stops libm from
# setting errno, which nothing reads, and lets exp/log be vectorised.
COMPILE_ARGS = ["-O3", "-fno-math-errno"]
if DEBUG:
    COMPILE_ARGS = ["-O2", "-g", "-fno-math-errno"]

# ``<name>_avx2.pyx`` includes ``<name>.pyx``: the same kernels compiled with
# AVX2 and FMA, picked at run time by skseq._kernels.load on CPUs that have
# them; ``<name>_avx512.pyx`` likewise with AVX-512 (F, DQ, BW, VL: Skylake-X
# and later) and 512-bit vectors.  Built on x86-64 with GCC-style compilers only.
BUILD_AVX2 = platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32"
AVX512_ARGS = ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mfma"]


def compile_args(path):
    if path.stem.endswith("_avx2"):
        return COMPILE_ARGS + ["-mavx2", "-mfma"]
    if path.stem.endswith("_avx512"):
        return COMPILE_ARGS + AVX512_ARGS + ["-mprefer-vector-width=512"]
    return COMPILE_ARGS


extensions = [
    Extension(
        f"skseq._kernels.{path.stem}",
        [str(path)],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args(path),
        depends=[str(header) for header in Path("skseq/_kernels").glob("*.h")],
    )
    for path in sorted(Path("skseq/_kernels").glob("*.pyx"))
    if BUILD_AVX2 or not path.stem.endswith(("_avx2", "_avx512"))
]

# Neither Cython nor setuptools notices a change of compiler directives or
# flags: switching between the debug and the regular build must rebuild
# everything, or the "debug" kernels are the regular ones.  The flavour of the
# last build is kept beside the generated C files.
FLAVOUR = "debug" if DEBUG else "regular"
FLAVOUR_STAMP = Path("skseq/_kernels/.build-flavour")
FLAVOUR_CHANGED = not FLAVOUR_STAMP.exists() or FLAVOUR_STAMP.read_text() != FLAVOUR


class BuildKernels(build_ext):
    """build_ext that rebuilds on a flavour change and leaves the kernels in the source tree."""

    def finalize_options(self):
        super().finalize_options()
        self.force = self.force or FLAVOUR_CHANGED

    def run(self):
        super().run()
        if not self.inplace:
            self.copy_extensions_to_source()
        FLAVOUR_STAMP.write_text(FLAVOUR)


setup(
    ext_modules=cythonize(
        extensions, compiler_directives=COMPILER_DIRECTIVES, force=FLAVOUR_CHANGED
    ),
    cmdclass={"build_ext": BuildKernels},
)
