"""When setup.py reuses a compiled kernel (_build_helpers, beside setup.py), and its progress lines.

The decision is by content: the same sources and settings give the same
fingerprint whatever the files' times; any change to a file a module is made
from (its .pyx and what it includes, cimports or takes C declarations from,
transitively), or to a flag, gives another, and a change to any other file
does not; a library that is not the one stamped is never reused.
"""

import importlib.util
import io
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_helpers():
    spec = importlib.util.spec_from_file_location("_build_helpers", ROOT / "_build_helpers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helpers = load_helpers()

SETTINGS = {"flavour": "regular", "compile_args": ["-O3"], "cython": "3.1.0", "numpy": "2.3.0"}


@pytest.fixture
def kernels(tmp_path):
    """A small kernel directory: a portable module, its AVX2 twin, another module, shared files.

    ``_hmm`` cimports ``_common`` (which cimports ``_blas``), includes
    ``_elementary.pxi`` and takes declarations from ``_rows.h`` (which
    includes ``_lanes.h``); ``_scan`` cimports ``_blas`` only; nothing uses
    ``_unused.pxd``.
    """
    directory = tmp_path / "_kernels"
    directory.mkdir()
    (directory / "_hmm.pyx").write_text(
        "from libc.math cimport exp\n"
        "from ._common cimport zeros\n"
        'include "_elementary.pxi"\n'
        'cdef extern from "_rows.h":\n'
        "    double rows()\n"
    )
    (directory / "_hmm_avx2.pyx").write_text('# cython: language_level=3\ninclude "_hmm.pyx"\n')
    (directory / "_scan.pyx").write_text("from . cimport _blas\ndef scan():\n    pass\n")
    (directory / "_common.pxd").write_text("from ._blas cimport gemm\ncdef double zeros()\n")
    (directory / "_blas.pxd").write_text("cdef void gemm()\n")
    (directory / "_unused.pxd").write_text("cdef void unused()\n")
    (directory / "_elementary.pxi").write_text("cdef inline double one():\n    return 1.0\n")
    (directory / "_rows.h").write_text('#include <stddef.h>\n#include "_lanes.h"\n')
    (directory / "_lanes.h").write_text("static double rows(void);\n")
    return directory


def prints(directory, settings=SETTINGS):
    return {
        name: helpers.fingerprint(directory / f"{name}.pyx", settings)
        for name in ("_hmm", "_hmm_avx2", "_scan")
    }


def names(paths):
    return sorted(path.name for path in paths)


def test_source_files_follow_includes_cimports_and_headers_transitively(kernels):
    assert names(helpers.source_files(kernels / "_hmm_avx2.pyx")) == sorted(
        ["_hmm_avx2.pyx", "_hmm.pyx", "_elementary.pxi", "_common.pxd", "_blas.pxd"]
        + ["_rows.h", "_lanes.h"]
    )
    assert names(helpers.source_files(kernels / "_scan.pyx")) == ["_blas.pxd", "_scan.pyx"]


def test_same_contents_give_the_same_fingerprint_whatever_the_times(kernels):
    before = prints(kernels)
    assert len(set(before.values())) == 3
    # pip's build environment is new every time: newer files, same contents.
    for path in kernels.iterdir():
        os.utime(path, (path.stat().st_atime + 3600, path.stat().st_mtime + 3600))
    assert prints(kernels) == before
    assert prints(kernels, dict(reversed(SETTINGS.items()))) == before  # key order is no change


@pytest.mark.parametrize(
    "name, users",
    [
        ("_hmm.pyx", {"_hmm", "_hmm_avx2"}),
        ("_common.pxd", {"_hmm", "_hmm_avx2"}),
        ("_elementary.pxi", {"_hmm", "_hmm_avx2"}),
        ("_rows.h", {"_hmm", "_hmm_avx2"}),
        ("_lanes.h", {"_hmm", "_hmm_avx2"}),
        ("_blas.pxd", {"_hmm", "_hmm_avx2", "_scan"}),  # through _common.pxd for _hmm
        ("_unused.pxd", set()),
    ],
)
def test_a_changed_file_changes_exactly_the_modules_made_from_it(kernels, name, users):
    before = prints(kernels)
    with open(kernels / name, "a") as file:
        file.write("\n# one more line\n")
    after = prints(kernels)
    assert {module for module in before if after[module] != before[module]} == users


def test_the_scan_finds_what_cython_finds_in_the_real_kernels():
    """Each real module's .pyx/.pxd/.pxi files are those Cython's own dependency tree names.

    Cython's tree does not follow C headers; those are checked by the
    ``cdef extern from`` lines themselves.
    """
    dependencies = pytest.importorskip(
        "Cython.Build.Dependencies", reason="Cython is a build requirement, not a test one"
    )
    tree = dependencies.create_dependency_tree()
    directory = ROOT / "skseq" / "_kernels"
    modules = sorted(directory.glob("*.pyx"))
    assert len(modules) >= 15
    for pyx in modules:
        scanned = helpers.source_files(pyx)
        by_cython = {Path(path).resolve() for path in tree.all_dependencies(str(pyx))}
        siblings = {path for path in by_cython if path.parent == directory.resolve()}
        assert {path.resolve() for path in scanned if path.suffix != ".h"} == siblings, pyx.name
        text = "".join(path.read_text(encoding="utf-8") for path in scanned)
        headers = {path.name for path in scanned if path.suffix == ".h"}
        for header in directory.glob("*.h"):
            assert (f'cdef extern from "{header.name}"' in text) == (header.name in headers)
    # A .pxd that only some modules cimport is not in the others' fingerprints.
    assert "_linalg.pxd" in names(helpers.source_files(directory / "_kalman.pyx"))
    assert "_linalg.pxd" not in names(helpers.source_files(directory / "_hmm.pyx"))


@pytest.mark.parametrize(
    "change",
    [
        {"flavour": "debug"},
        {"compile_args": ["-O2", "-g"]},
        {"cython": "3.1.1"},
        {"numpy": "2.3.1"},
    ],
)
def test_a_changed_setting_changes_every_module(kernels, change):
    before = prints(kernels)
    after = prints(kernels, {**SETTINGS, **change})
    assert all(after[module] != before[module] for module in before)


def test_the_build_environment_names_versions_not_paths():
    pytest.importorskip("Cython", reason="Cython is a build requirement, not a test one")
    environment = helpers.build_environment()
    for key in ("cython", "numpy", "scipy", "ext_suffix"):
        assert environment[key]
    assert "pip-build-env" not in repr(environment)


def test_a_stamped_library_is_reused_only_while_it_is_the_one_stamped(kernels):
    library = kernels / "_hmm.so"
    library.write_bytes(b"compiled once")
    stamps = helpers.Stamps(kernels / helpers.STAMP_FILE)
    assert not stamps.reusable("_hmm", "f1", library)  # no stamp file yet
    stamps.record("_hmm", "f1", library, flavour="regular")
    stamps.save()

    stamps = helpers.Stamps(kernels / helpers.STAMP_FILE)
    assert stamps.reusable("_hmm", "f1", library)
    assert not stamps.reusable("_hmm", "f2", library)  # something it is made from changed
    assert not stamps.reusable("_scan", "f1", library)  # never stamped
    library.write_bytes(b"copied in from elsewhere")
    assert not stamps.reusable("_hmm", "f1", library)
    library.unlink()
    assert not stamps.reusable("_hmm", "f1", library)


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]"])
def test_an_unreadable_stamp_file_means_rebuild(kernels, content):
    (kernels / helpers.STAMP_FILE).write_text(content)
    library = kernels / "_hmm.so"
    library.write_bytes(b"x")
    assert not helpers.Stamps(kernels / helpers.STAMP_FILE).reusable("_hmm", "f1", library)


def test_build_jobs(monkeypatch):
    monkeypatch.setenv("SKSEQ_BUILD_JOBS", "3")
    assert helpers.build_jobs() == 3
    monkeypatch.setenv("SKSEQ_BUILD_JOBS", "0")
    with pytest.raises(ValueError, match="SKSEQ_BUILD_JOBS"):
        helpers.build_jobs()
    monkeypatch.delenv("SKSEQ_BUILD_JOBS")
    assert helpers.build_jobs() >= 1


class Terminal(io.StringIO):
    pass


def test_progress_lines_go_to_the_output_and_the_terminal():
    output, terminal = io.StringIO(), Terminal()
    progress = helpers.Progress(stream=output, terminal=terminal)
    progress.say("compiling _hmm (1/2) ...")
    progress.say("_hmm compiled in 1 min 05 s", terminal=False)
    progress.say("compiling _scan (2/2) ...")
    assert output.getvalue().splitlines() == [
        "skseq: compiling _hmm (1/2) ...",
        "skseq: _hmm compiled in 1 min 05 s",
        "skseq: compiling _scan (2/2) ...",
    ]
    # Below pip's spinner line first, then over the spinner's stray character.
    assert terminal.getvalue() == (
        "\nskseq: compiling _hmm (1/2) ...\n\r\033[Kskseq: compiling _scan (2/2) ...\n"
    )


def test_no_terminal_copy_when_the_output_is_the_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    opened = []
    monkeypatch.setattr(helpers, "open_terminal", lambda: opened.append(1))
    progress = helpers.Progress(stream=Tty())
    progress.say("compiling _hmm (1/1) ...")
    assert progress.terminal is None and not opened


def test_format_duration():
    assert helpers.format_duration(42.4) == "42 s"
    assert helpers.format_duration(185) == "3 min 05 s"
