"""The documentation builds without warnings and documents every public name.

The build runs Sphinx as ``python -m sphinx -W --keep-going -b html`` into a
temporary directory (nothing is written into ``doc/``); it is skipped when
Sphinx or numpydoc is not installed (``pip install ".[doc]"``).
"""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "doc"

# Modules whose ``__all__`` is public API and must appear in the API reference.
PUBLIC_MODULES = [
    "skseq",
    "skseq.hmm",
    "skseq.lds",
    "skseq.neural",
    "skseq.inference",
    "skseq.inference.gaussian",
    "skseq.inference.kalman",
    "skseq.inference.scan",
    "skseq.inference.s4d",
    "skseq.inference.rnn",
    "skseq.inference.attention",
    "skseq.datasets",
    "skseq.streams",
]


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOC),
            str(tmp_path / "html"),
        ],
        # Not the repository root: ``python -m`` puts the working directory
        # first on sys.path, and doc/conf.py decides which skseq to document.
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, (
        "Sphinx reported warnings or errors:\n" + completed.stdout + completed.stderr
    )
    assert (tmp_path / "html" / "index.html").is_file()
    assert (tmp_path / "html" / "api" / "index.html").is_file()


def _documented_objects():
    """The objects named by the autodoc directives of doc/api/*.rst."""
    directive = re.compile(r"^\.\. auto(?:class|function):: (\S+)", re.MULTILINE)
    current = re.compile(r"^\.\. currentmodule:: (\S+)", re.MULTILINE)
    objects = []
    for page in sorted((DOC / "api").glob("*.rst")):
        text = page.read_text(encoding="utf-8")
        module_match = current.search(text)
        for name in directive.findall(text):
            module_name = module_match.group(1) if module_match else None
            if "." in name and module_match is None:
                module_name, name = name.rsplit(".", 1)
            objects.append(getattr(importlib.import_module(module_name), name))
    return objects


def test_every_public_name_has_an_api_page():
    documented = _documented_objects()
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if not any(value is obj for obj in documented):
                missing.append(f"{module_name}.{name}")
    assert not missing, (
        "Public names without a page in doc/api/ (add a stub page and list it in "
        f"doc/api/index.rst): {missing}"
    )


def test_architecture_example_runs():
    """The worked emission model of doc/user_guide/architecture.rst fits, decodes and streams."""
    sys.path.insert(0, str(DOC))
    try:
        from check_snippets import run_page
    finally:
        sys.path.remove(str(DOC))
    ok, _, output = run_page(DOC / "user_guide" / "architecture.rst")
    assert ok, output
