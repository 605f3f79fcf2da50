"""Build the Cython kernels of skseq.

Every ``skseq/_kernels/*.pyx`` file becomes the extension module
``skseq._kernels.<name>``.  Set ``SKSEQ_DEBUG_KERNELS=1`` to compile with bounds
and wrap-around checks switched on (slow; for hunting memory errors).

Every build also leaves the compiled kernels in the source tree (as
``build_ext --inplace`` does), even for a regular ``pip install .``: Python
puts the current directory first on ``sys.path``, so any command run from the
root of a checkout (``python -m skseq demo``, ``python -m sphinx ...``)
imports ``./skseq`` rather than the installed copy, and that source tree must
then be complete.  The next build reuses those libraries for every module
whose sources, flags and build environment are unchanged (``_build_helpers``),
so ``pip install -e ".[test]"`` after ``pip install .`` compiles nothing; the
others are compiled in parallel on every core (``SKSEQ_BUILD_JOBS`` sets how
many at a time), with one line per module on the terminal.
"""

import itertools
import os
import platform
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The build helpers sit beside this file (pip's build backend does not put
# this directory on sys.path).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _build_helpers import (  # noqa: E402
    STAMP_FILE,
    Progress,
    Stamps,
    build_environment,
    build_jobs,
    fingerprint,
    format_duration,
    generate_c,
    source_files,
    source_size,
)

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
        depends=[str(source) for source in source_files(path) if source != path],
    )
    for path in sorted(Path("skseq/_kernels").glob("*.pyx"))
    if BUILD_AVX2 or not path.stem.endswith(("_avx2", "_avx512"))
]

FLAVOUR = "debug" if DEBUG else "regular"
KERNELS = Path("skseq/_kernels")


class BuildKernels(build_ext):
    """build_ext that reuses unchanged kernels, compiles the others in parallel and says so.

    A module is recompiled only when its fingerprint (_build_helpers.fingerprint:
    sources, Cython/numpy/scipy versions, flags, directives, flavour, Python ABI)
    differs from the one stamped beside its library in the source tree; a
    change of flavour (SKSEQ_DEBUG_KERNELS) therefore rebuilds everything.
    The libraries are left in the source tree, even for a regular install.
    """

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:  # no -j given: every usable core (or SKSEQ_BUILD_JOBS)
            self.parallel = build_jobs()

    def in_tree(self, ext):
        return Path(self.get_ext_filename(ext.name))

    def run(self):
        self.clock = time.monotonic()
        self.progress = Progress()
        self.stamps = Stamps(KERNELS / STAMP_FILE)
        environment = build_environment()
        self.fingerprints = {
            ext.name: fingerprint(
                ext.sources[0],
                {
                    **environment,
                    "flavour": FLAVOUR,
                    "directives": COMPILER_DIRECTIVES,
                    "compile_args": ext.extra_compile_args,
                    "macros": ext.define_macros,
                },
            )
            for ext in self.extensions
        }
        self.reused = {
            ext.name
            for ext in self.extensions
            if self.stamps.reusable(ext.name, self.fingerprints[ext.name], self.in_tree(ext))
        }
        stale = [ext for ext in self.extensions if ext.name not in self.reused]
        for ext in self.extensions:
            if ext.name in self.reused:
                self.progress.say(f"{short_name(ext)} reused (unchanged)", terminal=False)
        if not stale:
            self.progress.say(f"all {modules(len(self.extensions))} unchanged, reused")
        else:
            if self.reused:
                self.progress.say(
                    f"{len(self.reused)} of {modules(len(self.extensions))} unchanged, reused"
                )
            self.progress.say(
                f"building {modules(len(stale))}, {self.parallel} at a time: "
                "Cython generates the C, then the compiler compiles it (minutes each)"
            )
            # Content decides, not times (pip's build environment is new every
            # time): whatever is stale is regenerated, several at once, the
            # longest first.
            stale.sort(key=lambda ext: source_size(ext.sources[0]), reverse=True)
            with ProcessPoolExecutor(min(self.parallel, len(stale))) as pool:
                jobs = {
                    pool.submit(generate_c, ext, COMPILER_DIRECTIVES): ext for ext in stale
                }
                for number, job in enumerate(as_completed(jobs), 1):
                    ext = jobs[job]
                    ext.sources, seconds = job.result()
                    self.progress.say(
                        f"{short_name(ext)}: C generated ({number}/{len(stale)}, "
                        f"{format_duration(seconds)})"
                    )
            # Largest generated C first, so that the last module to start is a
            # short one and no core idles at the end while another compiles.
            self.extensions.sort(
                key=lambda ext: -1 if ext.name in self.reused else os.path.getsize(ext.sources[0]),
                reverse=True,
            )
        self.stale_count = len(stale)
        self.numbers = itertools.count(1)
        self.seconds = {}
        self.force = True  # only stale modules reach the compiler
        super().run()
        if not self.inplace:
            self.copy_extensions_to_source()
        for ext in stale:
            self.stamps.record(
                ext.name,
                self.fingerprints[ext.name],
                self.in_tree(ext),
                flavour=FLAVOUR,
                compile_seconds=self.seconds[ext.name],
            )
        self.stamps.save()
        if stale:
            self.progress.say(
                f"kernels ready: {len(stale)} built in "
                f"{format_duration(time.monotonic() - self.clock)}, {len(self.reused)} reused"
            )

    def build_extension(self, ext):
        if ext.name in self.reused:
            target = Path(self.get_ext_fullpath(ext.name))
            if target.resolve() != self.in_tree(ext).resolve():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(self.in_tree(ext), target)
            return
        number = next(self.numbers)  # atomic: build_extension runs in several threads
        self.progress.say(f"compiling {short_name(ext)} ({number}/{self.stale_count}) ...")
        start = time.monotonic()
        super().build_extension(ext)
        self.seconds[ext.name] = round(time.monotonic() - start, 1)
        self.progress.say(
            f"{short_name(ext)} compiled in {format_duration(self.seconds[ext.name])}",
            terminal=False,
        )

    def copy_extensions_to_source(self):
        """Copy the compiled (not the reused) libraries into the source tree.

        Each is written beside its destination and renamed over it, so a
        process that has the old library loaded keeps a valid file.
        """
        for ext in self.extensions:
            if ext.name in self.reused:
                continue
            built = Path(self.build_lib) / self.get_ext_filename(ext.name)
            destination = self.in_tree(ext)
            temporary = destination.with_name(destination.name + ".tmp")
            shutil.copy(built, temporary)
            os.replace(temporary, destination)


def modules(count):
    return f"{count} kernel module" + ("" if count == 1 else "s")


def short_name(ext):
    return ext.name.rpartition(".")[2]


setup(ext_modules=extensions, cmdclass={"build_ext": BuildKernels})
