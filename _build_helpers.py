"""What setup.py needs to build the kernels quickly and say what it does.

Not part of the installed package: setup.py imports it from the source tree.

A kernel module is recompiled only when something it is made from changed.
That is decided by content, never by modification times: pip builds in a fresh
temporary environment every time, whose numpy headers are always "newer" than
the generated C, so Cython's and setuptools' own time-based checks rebuild
everything on every install.  Instead each module gets a fingerprint (a hash of
its source files, of the versions of Cython, numpy and scipy it is generated
against, of its compiler flags and directives, and of the Python ABI), stored
with a hash of the compiled library in the source tree's stamp file
(``skseq/_kernels/.build-stamps.json``).  A library whose stamp matches both is
reused as it is.
"""

import hashlib
import json
import os
import re
import sys
import sysconfig
import threading
from pathlib import Path

STAMP_FILE = ".build-stamps.json"

# Environment variables the compiler driver reads: a different compiler or
# different flags make a different library.
COMPILER_VARIABLES = ("CC", "CFLAGS", "CPPFLAGS", "LDSHARED", "LDFLAGS")

# The lines by which a kernel source names another file it is made from: a
# textual ``include "..."``, a relative cimport of a sibling ``.pxd``
# (``from ._blas cimport ...`` or ``from . cimport _blas``; the kernels use no
# absolute cimports of each other), a C header (``cdef extern from "x.h"``) and
# a header that header includes (``#include "y.h"``).
_INCLUDE = re.compile(r"""^[ \t]*include[ \t]+["']([^"']+)["']""", re.MULTILINE)
_CIMPORT_FROM = re.compile(r"^[ \t]*from[ \t]+\.(\w+)[ \t]+cimport\b", re.MULTILINE)
_CIMPORT_NAMES = re.compile(r"^[ \t]*from[ \t]+\.[ \t]+cimport[ \t]+([\w, \t]+)", re.MULTILINE)
_EXTERN = re.compile(r"""^[ \t]*cdef[ \t]+extern[ \t]+from[ \t]+["']([^"'*]+)["']""", re.MULTILINE)
_C_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.MULTILINE)


def file_digest(path):
    """The SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def named_files(path):
    """The sibling files one kernel source names directly, as paths (existing or not).

    ``include "x.pxi"`` gives ``x.pxi``; ``from ._blas cimport ...`` and
    ``from . cimport _blas`` give ``_blas.pxd``; ``cdef extern from "rows.h"``
    and ``#include "rows.h"`` give ``rows.h``.  Comments and docstrings are
    not told apart from code: a mention there can only add a file, never
    lose one.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    names = _INCLUDE.findall(text) + _EXTERN.findall(text) + _C_INCLUDE.findall(text)
    names += [f"{module}.pxd" for module in _CIMPORT_FROM.findall(text)]
    for group in _CIMPORT_NAMES.findall(text):
        names += [f"{module.strip()}.pxd" for module in group.split(",") if module.strip()]
    return [path.parent / name for name in names]


def source_files(pyx):
    """The files a kernel module is generated from, sorted.

    The ``.pyx`` file and, followed transitively, every sibling file it
    includes (an AVX2 twin includes its portable ``.pyx``), cimports (a
    ``.pxd``, and what that ``.pxd`` cimports in turn) or takes C
    declarations from (``cdef extern from "x.h"``, and the headers that
    header includes): exactly the files whose change can change the module's
    generated C or compiled library, so that editing one ``.pxd`` rebuilds
    only the modules that use it.  Named files that do not exist (a cimport
    of a ``.pyx``-only module) are passed over.
    """
    pyx = Path(pyx)
    found = set()
    pending = [pyx]
    while pending:
        path = pending.pop()
        if path in found or not path.is_file():
            continue
        found.add(path)
        pending.extend(named_files(path))
    return sorted(found)


def build_environment():
    """What the generated C and the compiled library depend on besides the sources."""
    import Cython
    import numpy
    import scipy

    return {
        "cython": Cython.__version__,
        # numpy's C API (``cimport numpy``) and scipy's BLAS/LAPACK declarations
        # (``cimport scipy.linalg.cython_blas``); not their paths, which are
        # those of pip's temporary build environment.
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "platform": sysconfig.get_platform(),
        "python_cc": sysconfig.get_config_var("CC"),
        "python_cflags": sysconfig.get_config_var("CFLAGS"),
        "environment": {name: os.environ.get(name) for name in COMPILER_VARIABLES},
    }


def fingerprint(pyx, settings):
    """A hash of everything a kernel module's compiled library is made from.

    Parameters
    ----------
    pyx : path
        The module's ``.pyx`` file.
    settings : dict
        JSON-serialisable build settings: the build environment
        (:func:`build_environment`), compiler flags, macros, Cython
        directives, the build flavour.

    Returns
    -------
    str
        Hex SHA-256 over the contents (not the times) of :func:`source_files`
        and over ``settings``.
    """
    pyx = Path(pyx)
    files = {
        path.relative_to(pyx.parent).as_posix(): file_digest(path) for path in source_files(pyx)
    }
    payload = json.dumps({"files": files, "settings": settings}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class Stamps:
    """The stamp file: for each module, the fingerprint its library was built from.

    Each entry also holds the hash of the library itself, so a library replaced
    by other means (copied in, built by an older setup.py) is not mistaken for
    the one the stamp describes.
    """

    def __init__(self, path):
        self.path = Path(path)
        try:
            self.entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.entries = {}
        if not isinstance(self.entries, dict):
            self.entries = {}

    def reusable(self, name, fingerprint, library):
        """Whether ``library`` exists and was built from ``fingerprint``."""
        entry = self.entries.get(name)
        if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
            return False
        library = Path(library)
        return library.is_file() and file_digest(library) == entry.get("library")

    def record(self, name, fingerprint, library, **details):
        """Note that ``library`` (now in place) was built from ``fingerprint``."""
        self.entries[name] = {
            "fingerprint": fingerprint,
            "library": file_digest(library),
            **details,
        }

    def save(self):
        """Write the stamp file (atomically: a concurrent reader sees the old or the new one)."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
        os.replace(temporary, self.path)


def build_jobs():
    """How many modules to compile at once: ``SKSEQ_BUILD_JOBS``, else the usable cores."""
    requested = os.environ.get("SKSEQ_BUILD_JOBS", "").strip()
    if requested:
        jobs = int(requested)
        if jobs < 1:
            raise ValueError(f"SKSEQ_BUILD_JOBS must be a positive integer, got {requested!r}")
        return jobs
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def format_duration(seconds):
    """``"42 s"`` or ``"3 min 05 s"``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def open_terminal():
    """The controlling terminal for writing, or None (no terminal: CI, a daemon, Windows)."""
    try:
        return open("/dev/tty", "w", encoding="utf-8", errors="replace")
    except OSError:
        return None


class Progress:
    """Lines about the build on standard output and, under pip, on the terminal.

    pip runs the build with its output captured and shows only a spinner (the
    output appears with ``pip -v``, or if the build fails), so a build of
    several minutes would say nothing.  When standard output is not a terminal
    but there is a controlling terminal, the main lines are also written there
    directly.  Safe to call from the compiling threads.
    """

    def __init__(self, stream=None, terminal=None):
        self.stream = sys.stdout if stream is None else stream
        if terminal is None:
            isatty = getattr(self.stream, "isatty", None)
            terminal = None if isatty is not None and isatty() else open_terminal()
        self.terminal = terminal
        self._lock = threading.Lock()
        self._first_terminal_line = True

    def say(self, text, terminal=True):
        """Print ``skseq: <text>``; also on the terminal unless ``terminal`` is false."""
        line = f"skseq: {text}"
        with self._lock:
            print(line, file=self.stream, flush=True)
            if terminal and self.terminal is not None:
                # pip's spinner sits at the end of the current line: start below
                # it the first time, later clear the spinner's character that
                # it wrote at the start of the new line.
                prefix = "\n" if self._first_terminal_line else "\r\033[K"
                self._first_terminal_line = False
                try:
                    self.terminal.write(prefix + line + "\n")
                    self.terminal.flush()
                except OSError:
                    self.terminal = None


def generate_c(extension, directives):
    """Run Cython on one extension; its new sources and the seconds it took.

    A module-level function, so that a process pool can run several at once
    (Cython holds the GIL: threads would take turns).
    """
    import time

    from Cython.Build import cythonize

    start = time.monotonic()
    (generated,) = cythonize([extension], compiler_directives=directives, force=True, quiet=True)
    return generated.sources, time.monotonic() - start


def source_size(pyx):
    """Bytes of a module's own .pyx and the .pyx it includes: a proxy for its build time."""
    return sum(path.stat().st_size for path in source_files(pyx) if path.suffix == ".pyx")
