"""Sphinx configuration of the skseq documentation.

Build with ``python -m sphinx -W --keep-going -b html doc doc/_build/html``:
it runs every gallery script ``doc/gallery/plot_*.py`` (sphinx-gallery) and
writes their pages into ``doc/auto_examples/``.  Add ``-D plot_gallery=0`` to
build the pages without running the scripts.  The build needs no network
access: intersphinx is off unless the environment variable
``SKSEQ_DOCS_INTERSPHINX=1`` is set.  Neither do the built pages: MathJax, which
renders the user guide's mathematics, is copied into ``_static/mathjax/`` from
the package sphinx-mathjax-offline (in the doc extra) instead of being loaded
from a CDN.
"""

import os
import sys
from pathlib import Path

DOC_DIR = Path(__file__).resolve().parent
ROOT = DOC_DIR.parent
# Document the package of this checkout when its kernels are compiled in place
# (``pip install -e .``); otherwise the installed skseq.
if any((ROOT / "skseq" / "_kernels").glob("_hmm.*.so")) or any(
    (ROOT / "skseq" / "_kernels").glob("_hmm.*.pyd")
):
    sys.path.insert(0, str(ROOT))

import skseq  # noqa: E402

# -- project -------------------------------------------------------------------

project = "skseq"
author = "the skseq developers"
copyright = "the skseq developers"  # noqa: A001
version = ".".join(skseq.__version__.split(".")[:2])
release = skseq.__version__

# -- extensions ----------------------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # A packaged MathJax 3, copied into the built pages' _static/mathjax/ and
    # set as mathjax_path, so the mathematics renders without a network.
    "sphinx-mathjax-offline",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

if os.environ.get("SKSEQ_DOCS_INTERSPHINX") == "1":
    # Optional: needs network access to fetch the inventories.
    extensions.append("sphinx.ext.intersphinx")
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "scipy": ("https://docs.scipy.org/doc/scipy", None),
        "sklearn": ("https://scikit-learn.org/stable", None),
        "joblib": ("https://joblib.readthedocs.io/en/stable", None),
    }

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"
language = "en"
pygments_style = "sphinx"
default_role = "literal"

# -- autodoc / autosummary -------------------------------------------------------

# The stub pages in doc/api/ are written by hand (one per public
# object) and kept in the repository, so a build never writes into doc/.
autosummary_generate = False
autodoc_default_options = {
    "members": True,
    "inherited-members": True,
    "member-order": "bysource",
}
autodoc_typehints = "none"
autoclass_content = "class"

# -- numpydoc ---------------------------------------------------------------------

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False
numpydoc_validation_checks = set()

# -- gallery -------------------------------------------------------------------

# Every doc/gallery/plot_*.py is an example: sphinx-gallery runs it (matplotlib
# on the Agg backend), captures its figures and output, and writes one page per
# script into doc/auto_examples/ (generated, not committed).
# doc/_gallery.py, named in the configuration below, is imported from here.
sys.path.insert(0, str(DOC_DIR))
# doc/gallery/ holds the scripts' source, not pages.
exclude_patterns += ["gallery"]

sphinx_gallery_conf = {
    "examples_dirs": "gallery",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "within_subsection_order": "_gallery.ExampleOrder",
    "reset_modules": ("matplotlib", "_gallery.reset_sklearn_config"),
    "remove_config_comments": True,
    "download_all_examples": False,
    "show_signature": False,
    "min_reported_time": 1,
    # The execution-time pages (sg_execution_times) load jQuery and DataTables
    # from CDNs; every example's page still gives its own running time.
    "write_computation_times": False,
    # A failing example fails the build (with -W and without it).
    "only_warn_on_example_error": False,
    "abort_on_example_error": False,
}

# -- html ------------------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"skseq {release}"
html_static_path = ["_static"]
html_css_files = ["skseq.css"]
html_theme_options = {
    "logo": {"text": f"skseq {version}"},
    "header_links_before_dropdown": 6,
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": [], "getting_started": [], "performance": []}
html_show_sourcelink = False
html_copy_source = False

# -- which members the API pages show ----------------------------------------------


def _skip_foreign_members(app, what, name, obj, skip, options):
    """Document only what skseq defines.

    Classes inherit ``get_params``, ``set_params``, ``set_output``,
    ``get_metadata_routing``, ``set_*_request`` ... from scikit-learn; those
    are documented there (and their docstrings point into scikit-learn's own
    user guide), so the API pages leave them out.
    """
    if skip or what != "class":
        return skip
    if name.startswith("set_") and name.endswith("_request"):
        return True
    if name in {"get_metadata_routing", "get_params", "set_params", "set_output"}:
        return True
    module = getattr(obj, "__module__", None)
    if module is None and isinstance(obj, property):
        module = getattr(obj.fget, "__module__", None)
    if module is not None and not module.startswith("skseq"):
        return True
    return None


def _wide_gallery_pages(app, docname, source):
    """The gallery's example pages give the secondary sidebar's width to code and figures.

    sphinx-gallery writes these pages, so the theme's page-level switch is
    added as they are read.
    """
    if docname.startswith("auto_examples/plot_"):
        source[0] = ":html_theme.sidebar_secondary.remove: true\n\n" + source[0]


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)
    app.connect("source-read", _wide_gallery_pages)
