"""Configuration helpers of the example gallery, imported by ``doc/conf.py``.

They live in a module of their own, not in ``conf.py``, because sphinx-gallery
takes them by their qualified names (``"_gallery.ExampleOrder"``): Sphinx
caches its configuration by pickling it, and a class or function defined in
``conf.py`` cannot be pickled.
"""

import importlib
import re

# Examples first in this order (a reading order: one per family, then the
# tools around them); any other ``plot_*.py`` follows, in alphabetical order,
# so that a new script appears in the gallery without editing this list.
READING_ORDER = [
    "plot_earthquakes.py",
    "plot_business_cycle.py",
    "plot_nile.py",
    "plot_stochastic_em.py",
    "plot_grid_search.py",
    "plot_inference_functions.py",
    "plot_stream_classifier.py",
    "plot_elman_gradients.py",
    "plot_selective_copying.py",
    "plot_inductive_bias.py",
    "plot_dmm_sunspots.py",
]

# Scripts that need a public name which is not (yet) in this checkout of
# skseq: the gallery leaves them out instead of failing the build.
REQUIRED_NAMES = {
    "plot_earthquakes.py": ("skseq.datasets", "load_earthquakes"),
}


class ExampleOrder:
    """Sort key of the gallery's scripts: :data:`READING_ORDER`, then by name.

    sphinx-gallery builds it with the gallery's source directory and calls it
    on each file name.
    """

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        if filename in READING_ORDER:
            return (0, READING_ORDER.index(filename), filename)
        return (1, 0, filename)

    def __repr__(self):
        # sphinx-gallery compares configurations by their repr.
        return f"{type(self).__name__}()"


def skipped_examples(gallery_dir):
    """The scripts of :data:`REQUIRED_NAMES` whose required name cannot be imported."""
    return [
        script
        for script, (module_name, name) in REQUIRED_NAMES.items()
        if (gallery_dir / script).is_file()
        and not hasattr(importlib.import_module(module_name), name)
    ]


def ignore_pattern(skipped):
    """A regular expression for sphinx-gallery's ``ignore_pattern``.

    It matches ``__init__.py`` (sphinx-gallery's default) and the scripts
    ``skipped``, by file name (or by path, as some versions match).
    """
    return "|".join([r"__init__\.py"] + [r"(^|/)" + re.escape(script) + "$" for script in skipped])


def reset_sklearn_config(gallery_conf, fname, when=None):
    """Switch scikit-learn's metadata routing off between examples.

    An example that turns it on (cross-validation over sequences) would
    otherwise change how the next examples' estimators are called.
    """
    import sklearn

    sklearn.set_config(enable_metadata_routing=False)
