"""Small real data sets bundled with skseq (all public domain; see data/README.md).

Every loader returns a :class:`~sklearn.utils.Bunch` with ``data``,
``feature_names``, ``dates``, ``year``, ``frame`` (a pandas DataFrame with
``as_frame=True``) and ``DESCR`` (contents, source and licence).
"""

from ._loaders import (
    load_danish_money,
    load_earthquakes,
    load_nile,
    load_sunspots,
    load_us_macro,
)

__all__ = [
    "load_us_macro",
    "load_nile",
    "load_sunspots",
    "load_earthquakes",
    "load_danish_money",
]
