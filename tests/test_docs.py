"""The documentation builds without warnings and documents every public name.

The build runs Sphinx as ``python -m sphinx -W --keep-going -b html`` on a
copy of ``doc/`` in a temporary directory (sphinx-gallery writes its pages
into the source tree, and nothing may be written into ``doc/``), without
running the gallery's scripts (``-D plot_gallery=0``: CI's docs build runs
them); it is skipped when the documentation's packages are not installed
(``pip install ".[doc]"``).  The built pages load nothing from the network, and
headless Chromium, where one is installed, shows the user guide's mathematics
typeset by the packaged MathJax with every host name unresolvable.
"""

import ast
import importlib
import importlib.util
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "doc"


def _public_modules():
    """skseq and every submodule without a leading underscore in its dotted name: each
    ``__all__`` is public API and must appear in the API reference."""
    import skseq

    names = [
        module.name
        for module in pkgutil.walk_packages(skseq.__path__, "skseq.")
        if not any(part.startswith("_") for part in module.name.split("."))
    ]
    return ["skseq", *sorted(names)]


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    """The HTML build of a copy of doc/: Sphinx's completed process and the output folder."""
    for package in (
        "sphinx",
        "numpydoc",
        "pydata_sphinx_theme",
        "sphinx_gallery",
        "sphinx-mathjax-offline",
    ):
        pytest.importorskip(package)
    tmp_path = tmp_path_factory.mktemp("docs")
    source = tmp_path / "doc"
    shutil.copytree(
        DOC, source, ignore=shutil.ignore_patterns("_build", "auto_examples", "__pycache__")
    )
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
            "-D",
            "plot_gallery=0",
            "-d",
            str(tmp_path / "doctrees"),
            str(source),
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
    return completed, tmp_path / "html"


def test_docs_build_without_warnings(built_docs):
    completed, html = built_docs
    assert completed.returncode == 0, (
        "Sphinx reported warnings or errors:\n" + completed.stdout + completed.stderr
    )
    assert (html / "index.html").is_file()
    assert (html / "api" / "index.html").is_file()
    # Every gallery script has its page (the gallery picks up any plot_*.py).
    for script in GALLERY_SCRIPTS:
        assert (html / "auto_examples" / f"{script.stem}.html").is_file(), script


# A script or stylesheet that a page loads from elsewhere than the built folder
# (``https://``, ``http://`` or protocol-relative ``//``).
_EXTERNAL_LOAD = re.compile(
    r"<(?:script[^>]*\bsrc|link[^>]*\bhref)\s*=\s*[\"']?(?:https?:)?//[^\"'\s>]*", re.IGNORECASE
)


def test_built_pages_load_nothing_from_the_network(built_docs):
    """Every page's scripts and stylesheets, MathJax's included, are files of the build."""
    completed, html = built_docs
    assert completed.returncode == 0, completed.stdout + completed.stderr
    pages = sorted(html.rglob("*.html"))
    assert pages
    external = {
        str(page.relative_to(html)): _EXTERNAL_LOAD.findall(page.read_text(encoding="utf-8"))
        for page in pages
    }
    external = {page: loads for page, loads in external.items() if loads}
    assert not external, f"pages load from the network: {external}"
    page = (html / "user_guide" / "hmm.html").read_text(encoding="utf-8")
    assert re.search(r"<script[^>]*src=\"\.\./_static/mathjax/tex-chtml\.js\"", page)
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()


def _chromium():
    """The path of a Chromium (or Chrome) binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def _dump_dom(page, profile, window="1280,1400"):
    """The DOM of ``page`` (a file) after headless Chromium has loaded and run it,
    with every host name unresolvable (no network for the page)."""
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium binary found (Debian: apt-get install chromium)")
    dumped = subprocess.run(
        [
            chromium,
            "--headless",
            # Needed to run as root (CI's case); the page is one of ours, from disk.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            # No network for the page: every host name fails to resolve.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            # Wide enough for the theme's three columns (the narrowest text).
            f"--window-size={window}",
            # Virtual time runs until the page is idle (MathJax done) or this budget.
            "--virtual-time-budget=30000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    return dumped.stdout


# Run in the page once it is laid out: the names (API cross-references) in its
# tables that the browser broke over two lines, as JSON in a <div> it appends.
_BROKEN_NAMES_PROBE = """
<script>
window.addEventListener("load", () => {
  const broken = [];
  for (const code of document.querySelectorAll(".bd-content table code.xref")) {
    const lines = new Set(Array.from(code.getClientRects(), (box) => Math.round(box.top)));
    if (lines.size > 1) broken.push(code.textContent);
  }
  const out = document.createElement("div");
  out.id = "broken-names";
  out.textContent = JSON.stringify(broken);
  document.body.appendChild(out);
});
</script>
"""


@pytest.fixture(scope="module")
def hmm_page_in_chromium(built_docs, tmp_path_factory):
    """The HMM user guide's HTML, and its DOM once headless Chromium has loaded it from
    disk with no network (the page with the probe above added, beside the original)."""
    completed, html = built_docs
    assert completed.returncode == 0, completed.stdout + completed.stderr
    page = html / "user_guide" / "hmm.html"
    source = page.read_text(encoding="utf-8")
    probe = page.with_name("_probe_hmm.html")
    probe.write_text(source.replace("</body>", _BROKEN_NAMES_PROBE + "</body>"), encoding="utf-8")
    return source, _dump_dom(probe, tmp_path_factory.mktemp("chromium"))


def test_maths_renders_offline_in_chromium(hmm_page_in_chromium):
    """The HMM user guide opened from disk in headless Chromium, with every host name
    unresolvable: MathJax typesets each formula, and no raw TeX is left on the page."""
    source, dom = hmm_page_in_chromium
    # Sphinx writes each formula as a span (inline) or div (display) of class "math".
    formulas = len(re.findall(r"<(?:span|div) class=\"math notranslate nohighlight\">", source))
    assert formulas > 50 and "\\[" in source
    assert "<mjx-container" in dom, "MathJax rendered nothing"
    # MathJax replaces each formula's TeX by one mjx-container.
    assert dom.count("<mjx-container") == formulas
    assert "<mjx-merror" not in dom, "MathJax reported a TeX error"
    text = re.sub(r"<[^>]+>", "", re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S))
    for delimiter in ("\\[", "\\]", "\\(", "\\)"):
        assert delimiter not in text, f"raw TeX ({delimiter}) left on the rendered page"


def test_tables_never_break_a_name_mid_word(hmm_page_in_chromium):
    """The HMM user guide's table once showed "CategoricalHM" / "M": laid out by
    headless Chromium at the theme's three-column width, no class name is split."""
    import json

    _, dom = hmm_page_in_chromium
    found = re.search(r'<div id="broken-names"[^>]*>(.*?)</div>', dom, re.S)
    assert found, "the probe did not run"
    broken = json.loads(found.group(1))
    assert not broken, f"the HMM user guide breaks these names across lines: {broken}"
    assert "CategoricalHMM" in dom and "MultinomialHMM" in dom


GALLERY_SCRIPTS = sorted((DOC / "gallery").glob("plot_*.py"))


@pytest.mark.parametrize("script", GALLERY_SCRIPTS, ids=lambda path: path.name)
def test_gallery_script_has_a_title_text_and_a_figure(script):
    """sphinx-gallery's format: a docstring with an RST title and some sentences, a plot."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree)
    assert docstring, f"{script.name} has no module docstring"
    lines = docstring.strip().splitlines()
    title_at = 1 if set(lines[0]) == {"="} else 0
    assert set(lines[title_at + 1]) == {"="} and len(lines[title_at + 1]) >= len(lines[title_at]), (
        f"{script.name}: the docstring must start with an RST title"
    )
    assert len(" ".join(lines[title_at + 2 :]).split()) >= 20, (
        f"{script.name}: say in a few sentences what the example shows"
    )
    source = script.read_text(encoding="utf-8")
    assert "matplotlib" in source and ("plt.show()" in source or "savefig" in source), (
        f"{script.name} draws no figure"
    )


def _doc_module(name):
    """A helper module of doc/ (not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(f"skseq_doc_{name}", DOC / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code_blocks(page):
    """The Python code blocks of a documentation page, as doc/check_snippets.py reads them."""
    return _doc_module("check_snippets").code_blocks(page.read_text(encoding="utf-8"))


def test_pykalman_page_runs_and_agrees_with_pykalman():
    """The side-by-side page's asserts compare both libraries: run them."""
    pytest.importorskip("pykalman")
    program = "\n\n".join(_code_blocks(DOC / "user_guide" / "pykalman.rst"))
    assert "from pykalman import KalmanFilter" in program
    exec(compile(program, "pykalman.rst", "exec"), {"__name__": "pykalman_page"})


def test_statsmodels_page_runs_and_agrees_with_statsmodels():
    """The structural-model page's asserts compare both libraries: run them."""
    pytest.importorskip("statsmodels")
    program = "\n\n".join(_code_blocks(DOC / "user_guide" / "statsmodels.rst"))
    assert "sm.tsa.UnobservedComponents" in program
    exec(compile(program, "statsmodels.rst", "exec"), {"__name__": "statsmodels_page"})


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
    for module_name in _public_modules():
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


HMM_NAMES = [
    "GaussianHMM",
    "GMMHMM",
    "CategoricalHMM",
    "MultinomialHMM",
    "PoissonHMM",
    "VariationalGaussianHMM",
    "VariationalCategoricalHMM",
]


@pytest.mark.parametrize("name", HMM_NAMES)
def test_hmmlearn_parameters_and_methods_are_kept(name):
    """doc/user_guide/hmmlearn.rst: every constructor parameter of hmmlearn's model, with
    its default, and every public method and attribute are skseq's too."""
    import inspect
    import warnings

    hmm = pytest.importorskip("hmmlearn.vhmm" if name.startswith("Variational") else "hmmlearn.hmm")
    import skseq

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hmmlearn's MultinomialHMM logs at construction
        theirs, ours = getattr(hmm, name), getattr(skseq, name)
    their_parameters = inspect.signature(theirs.__init__).parameters
    our_parameters = inspect.signature(ours.__init__).parameters
    for parameter in list(their_parameters)[1:]:
        assert parameter in our_parameters, f"{name} lacks hmmlearn's {parameter}"
        assert repr(our_parameters[parameter].default) == repr(
            their_parameters[parameter].default
        ), f"{name}.{parameter}: default differs from hmmlearn's"
    missing = {member for member in dir(theirs) if not member.startswith("_")} - set(dir(ours))
    assert not missing, f"{name} lacks hmmlearn's {sorted(missing)}"


def test_index_names_every_estimator():
    """The front page lists the estimators; it once left out DeepMarkovModel."""
    from sklearn.base import BaseEstimator

    import skseq

    index = (DOC / "index.rst").read_text(encoding="utf-8")
    public = {name: getattr(skseq, name) for name in skseq.__all__}
    estimators = [
        name
        for name, value in public.items()
        if isinstance(value, type) and issubclass(value, BaseEstimator)
    ]
    assert "DeepMarkovModel" in estimators
    missing = [name for name in estimators if not re.search(rf":class:`~[\w.]+\.{name}`", index)]
    assert not missing, f"doc/index.rst does not name {missing}"
