"""The layers as drawn in doc/user_guide/architecture.rst, and a self-contained project.

estimators (skseq.hmm, skseq.lds, skseq.neural, skseq.base) -> skseq.inference ->
skseq._kernels: nothing points upward and nothing skips a layer.  Checked on
the source with ``ast``, so a forbidden import fails here even if no test
happens to run the code that holds it.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "skseq"

ESTIMATOR_MODULES = sorted(
    [
        *(PACKAGE / "hmm").glob("*.py"),
        *(PACKAGE / "lds").glob("*.py"),
        *(PACKAGE / "neural").rglob("*.py"),
        PACKAGE / "base.py",
        PACKAGE / "__init__.py",
        PACKAGE / "_demo.py",
    ]
)
INFERENCE_MODULES = sorted((PACKAGE / "inference").glob("*.py"))


def imported_modules(path):
    """The absolute names of the skseq modules that ``path`` imports."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.append(module)
            names.extend(f"{module}.{alias.name}" for alias in node.names)
    return [name for name in names if name == "skseq" or name.startswith("skseq.")]


def test_import_scan_resolves_relative_imports():
    """The checker itself: relative imports resolve to the modules they name."""
    imports = imported_modules(PACKAGE / "hmm" / "_base.py")
    assert "skseq.inference.hmm" in imports and "skseq._parallel" in imports
    assert "skseq.inference.kalman" in imported_modules(PACKAGE / "lds" / "_lgssm.py")
    assert "skseq._kernels" in imported_modules(PACKAGE / "inference" / "hmm.py")


@pytest.mark.parametrize("path", ESTIMATOR_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_estimators_import_no_kernel(path):
    kernels = [name for name in imported_modules(path) if name.startswith("skseq._kernels")]
    assert not kernels, (
        f"{path.relative_to(ROOT)} imports {kernels}: estimators reach the kernels only "
        "through skseq.inference (add a function there)."
    )


@pytest.mark.parametrize("path", INFERENCE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_inference_imports_no_estimator(path):
    upward = [
        name
        for name in imported_modules(path)
        if name.split(".")[:2] in (["skseq", "hmm"], ["skseq", "lds"], ["skseq", "neural"])
        or name in ("skseq.base", "skseq")
    ]
    assert not upward, f"{path.relative_to(ROOT)} imports {upward}: arrows point one way."


def test_kernels_import_nothing_of_skseq_but_kernels():
    for path in sorted((PACKAGE / "_kernels").glob("*.py*")):
        if path.suffix not in (".py", ".pyx", ".pxd", ".pxi"):
            continue
        text = path.read_text(encoding="utf-8")
        assert "import skseq" not in text and "from skseq" not in text, path
        assert "from .." not in text, f"{path.name} imports from above the kernels"


# The kernel modules and the files they include (a .pxi can hold entry points).
KERNEL_SOURCES = sorted(
    [*(PACKAGE / "_kernels").glob("*.pyx"), *(PACKAGE / "_kernels").glob("*.pxi")]
)
# What a kernel entry point does with each array it is given, said on the
# argument's line as in scikit-learn's _k_means_lloyd.pyx.
ARGUMENT_ROLE = re.compile(r"#\s*(IN|OUT|INOUT|scratch)\b")


def kernel_array_arguments(path):
    """``(function, argument line)`` of every memoryview argument of the module's
    Python-visible functions (``def`` / ``cpdef``)."""
    text = path.read_text(encoding="utf-8")
    arguments = []
    for match in re.finditer(r"^(?:cp)?def (\w+)\((.*?)\):", text, re.S | re.M):
        for line in match.group(2).splitlines() or [match.group(2)]:
            if re.search(r"\w\[[:, ]*", line.split("#")[0]):
                arguments.append((match.group(1), line.strip()))
    return arguments


def test_kernel_argument_scan_finds_the_arguments():
    """The checker itself: it sees the arrays of a known entry point."""
    arguments = kernel_array_arguments(PACKAGE / "_kernels" / "_kalman.pyx")
    names = {
        line.split("#")[0].split()[-1].rstrip(",")
        for name, line in arguments
        if name == "filter_step"
    }
    assert {"previous_mean", "x", "filtered_mean", "filtered_cov"} <= names


def test_kernels_call_blas_products_through_one_wrapper():
    """Matrix products go through _blas.pxd's _gemm, in one calling convention:
    no kernel cimports ?gemm itself or defines a _gemm of its own, and the size
    from which products are cut into pieces is declared once."""
    directory = PACKAGE / "_kernels"
    offenders, piece_declarations = [], []
    for path in sorted(directory.glob("*.p*")):
        if path.suffix not in (".pyx", ".pxd", ".pxi"):
            continue
        text = path.read_text(encoding="utf-8")
        piece_declarations += [path.name] * len(
            re.findall(r"^\s*(?:cdef [\w ]+)?GEMM_PIECE_WORK\s*=", text, re.M)
        )
        if path.name == "_blas.pxd":
            continue
        if re.search(r"cython_blas cimport[^\n]*\b[sd]gemm\b", text) or re.search(
            r"^cdef (inline )?void _gemm\(", text, re.M
        ):
            offenders.append(path.name)
    assert not offenders, f"{offenders} call gemm directly: use _blas._gemm (RowMajor)"
    assert piece_declarations == ["_blas.pxd"], piece_declarations


@pytest.mark.parametrize("path", KERNEL_SOURCES, ids=lambda p: p.name)
def test_kernel_arrays_say_in_or_out(path):
    unmarked = [
        f"{name}: {line}"
        for name, line in kernel_array_arguments(path)
        if not ARGUMENT_ROLE.search(line)
    ]
    assert not unmarked, f"{path.name}: arrays without # IN / # OUT / # INOUT: {unmarked}"


@pytest.mark.parametrize("path", KERNEL_SOURCES, ids=lambda p: p.name)
def test_kernels_allocate_scratch_through_common(path):
    """Scratch comes from _common.pxd's allocators (numpy's C API), not numpy's
    Python functions on every call; only the build probe uses numpy itself."""
    if path.name == "_build_info.pyx":
        return
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"^\s*import numpy", text, re.M), f"{path.name} imports numpy"
    assert not re.search(r"^cdef \w+.*\b_zeros\w*\(", text, re.M), (
        f"{path.name} defines its own zeros helper: use _common.pxd"
    )


# -- self-contained ----------------------------------------------------------------

FORBIDDEN = ["MATH" + ".md", "DESIGN" + ".md", "../" + "shared"]
TEXT_SUFFIXES = {".py", ".pyx", ".pxd", ".pxi", ".h", ".rst", ".md", ".toml", ".txt", ".cfg"}


def project_text_files():
    roots = [PACKAGE, ROOT / "tests", ROOT / "benchmarks", ROOT / "doc", ROOT / ".ci"]
    top_level = ("README.md", "setup.py", "_build_helpers.py", "pyproject.toml")
    files = [ROOT / name for name in top_level]
    for root in roots:
        for path in root.rglob("*"):
            if "_build" in path.parts or not path.is_file():
                continue
            if path.suffix in TEXT_SUFFIXES or path.parent.name == ".ci":
                files.append(path)
    return files


def test_the_project_cites_no_file_outside_it():
    """The maths lives in doc/user_guide; nothing cites notes kept outside the repository."""
    files = project_text_files()
    assert len(files) > 50  # the scan really reads the tree
    offending = [
        f"{path.relative_to(ROOT)}: {word}"
        for path in files
        for word in FORBIDDEN
        if word in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert not offending, offending
