"""Sphinx configuration of the skseq documentation.

Build with ``python -m sphinx -W --keep-going -b html doc doc/_build/html``.
The build needs no network access: intersphinx is off unless the
environment variable ``SKSEQ_DOCS_INTERSPHINX=1`` is set.
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
    "numpydoc",
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

# -- html ------------------------------------------------------------------------

html_theme = "alabaster"
html_title = f"skseq {release}"
html_static_path = []
html_theme_options = {
    "description": "scikit-learn estimators for sequence models on Cython nogil kernels",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "240px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
html_show_sourcelink = False

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


def setup(app):
    app.connect("autodoc-skip-member", _skip_foreign_members)
