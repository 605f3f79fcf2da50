"""When setup.py reuses a compiled kernel (_build_helpers, beside setup.py), and its progress lines.

The decision is by content: the same sources and settings give the same
fingerprint whatever the files' times; any change to a file a module is made
from, or to a flag, gives another; a library that is not the one stamped is
never reused.
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
    """A small kernel directory: a portable module, its AVX2 twin, another module, shared files."""
    directory = tmp_path / "_kernels"
    directory.mkdir()
    (directory / "_hmm.pyx").write_text('from ._common cimport zeros\ninclude "_elementary.pxi"\n')
    (directory / "_hmm_avx2.pyx").write_text('# cython: language_level=3\ninclude "_hmm.pyx"\n')
    (directory / "_scan.pyx").write_text("def scan():\n    pass\n")
    (directory / "_common.pxd").write_text("cdef double zeros()\n")
    (directory / "_elementary.pxi").write_text("cdef inline double one():\n    return 1.0\n")
    (directory / "_rows.h").write_text("static double rows(void);\n")
    return directory


def prints(directory, settings=SETTINGS):
    return {
        name: helpers.fingerprint(directory / f"{name}.pyx", settings)
        for name in ("_hmm", "_hmm_avx2", "_scan")
    }


def test_source_files_follow_includes_and_take_the_shared_files(kernels):
    names = [path.name for path in helpers.source_files(kernels / "_hmm_avx2.pyx")]
    assert names == sorted(
        ["_hmm_avx2.pyx", "_hmm.pyx", "_elementary.pxi", "_common.pxd", "_rows.h"]
    )
    assert "_hmm.pyx" not in [path.name for path in helpers.source_files(kernels / "_scan.pyx")]


def test_same_contents_give_the_same_fingerprint_whatever_the_times(kernels):
    before = prints(kernels)
    assert len(set(before.values())) == 3
    # pip's build environment is new every time: newer files, same contents.
    for path in kernels.iterdir():
        os.utime(path, (path.stat().st_atime + 3600, path.stat().st_mtime + 3600))
    assert prints(kernels) == before
    assert prints(kernels, dict(reversed(SETTINGS.items()))) == before  # key order is no change


def test_a_changed_pyx_changes_its_module_and_its_twin_only(kernels):
    before = prints(kernels)
    with open(kernels / "_hmm.pyx", "a") as file:
        file.write("# one more line\n")
    after = prints(kernels)
    assert after["_hmm"] != before["_hmm"]
    assert after["_hmm_avx2"] != before["_hmm_avx2"]
    assert after["_scan"] == before["_scan"]


@pytest.mark.parametrize("name", ["_common.pxd", "_elementary.pxi", "_rows.h"])
def test_a_changed_shared_file_changes_every_module(kernels, name):
    before = prints(kernels)
    with open(kernels / name, "a") as file:
        file.write("\n")
    after = prints(kernels)
    assert all(after[module] != before[module] for module in before)


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
