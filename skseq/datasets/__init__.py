"""Small real data sets bundled with skseq (all public domain; see data/README.md).

Every loader returns a :class:`~sklearn.utils.Bunch` with ``data``,
``feature_names``, ``dates``, ``year``, ``frame`` (a pandas DataFrame with
``as_frame=True``) and ``DESCR`` (contents, source and licence).
"""

from . import _loaders
from ._loaders import *  # noqa: F403

# _loaders' __all__ is the one list of the loaders.
__all__ = list(_loaders.__all__)
