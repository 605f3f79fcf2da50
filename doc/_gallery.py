"""Configuration helpers of the example gallery, imported by ``doc/conf.py``.

They live in a module of their own, not in ``conf.py``, because sphinx-gallery
takes them by their qualified names (``"_gallery.ExampleOrder"``): Sphinx
caches its configuration by pickling it, and a class or function defined in
``conf.py`` cannot be pickled.
"""

# Examples first in this order (a reading order: one per family, then the
# tools around them); any other ``plot_*.py`` follows, in alphabetical order,
# so that a new script appears in the gallery without editing this list.
READING_ORDER = [
    "plot_earthquakes.py",
    "plot_business_cycle.py",
    "plot_regime_switching_gdp.py",
    "plot_nile.py",
    "plot_sunspot_durations.py",
    "plot_stochastic_em.py",
    "plot_grid_search.py",
    "plot_inference_functions.py",
    "plot_parallel.py",
    "plot_stream_classifier.py",
    "plot_elman_gradients.py",
    "plot_selective_copying.py",
    "plot_inductive_bias.py",
    "plot_dmm_sunspots.py",
]


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


def reset_sklearn_config(gallery_conf, fname, when=None):
    """Switch scikit-learn's metadata routing off between examples.

    An example that turns it on (cross-validation over sequences) would
    otherwise change how the next examples' estimators are called.
    """
    import sklearn

    sklearn.set_config(enable_metadata_routing=False)
