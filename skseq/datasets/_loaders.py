"""Loaders of the bundled data sets.

Each data set is a CSV file in ``data/`` whose first columns say when a row
was observed (``year``, and ``quarter`` for quarterly series) and whose other
columns are the series; ``data/<name>.rst`` is its description (provenance
and licence), returned as ``DESCR``.  Nothing is downloaded.
"""

from importlib import resources

import numpy as np
from sklearn.utils import Bunch

__all__ = [
    "load_us_macro",
    "load_nile",
    "load_sunspots",
    "load_earthquakes",
    "load_danish_money",
]


def _data_file(name):
    return resources.files("skseq.datasets").joinpath("data", name)


def _load(name, as_frame):
    """The Bunch of data set ``name`` (``data/<name>.csv`` and ``data/<name>.rst``).

    The rows are in time order.  ``dates`` holds the first day of each row's
    period (``datetime64[D]``).  With ``as_frame=True``, ``data`` and
    ``frame`` are one pandas DataFrame indexed by those dates, as
    scikit-learn's loaders return with ``as_frame=True`` (these series have
    no target, so ``frame`` has the feature columns only).
    """
    if as_frame not in (True, False):
        raise TypeError(f"as_frame must be True or False, got {as_frame!r}.")
    if as_frame:
        try:
            import pandas as pd
        except ImportError as error:
            raise ImportError(
                "as_frame=True needs pandas, which is not installed (pip install pandas)."
            ) from error
    with _data_file(f"{name}.csv").open("r") as handle:
        header = [field.strip('"').lower() for field in handle.readline().strip().split(",")]
        values = np.loadtxt(handle, delimiter=",", ndmin=2)
    n_time = 2 if header[1] == "quarter" else 1
    year = values[:, 0].astype(int)
    month = 3 * (values[:, 1].astype(int) - 1) if n_time == 2 else np.zeros_like(year)
    months_since_1970 = (year - 1970) * 12 + month
    dates = months_since_1970.astype("datetime64[M]").astype("datetime64[D]")
    bunch = Bunch(
        data=values[:, n_time:],
        feature_names=header[n_time:],
        dates=dates,
        year=year,
        frame=None,
        DESCR=_data_file(f"{name}.rst").read_text(encoding="utf-8"),
    )
    if n_time == 2:
        bunch.quarter = values[:, 1].astype(int)
    if as_frame:
        index = pd.DatetimeIndex(dates, name="date")
        bunch.frame = pd.DataFrame(bunch.data, columns=bunch.feature_names, index=index)
        bunch.data = bunch.frame
    return bunch


_RETURNS = """
    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like object with the attributes:

        data : ndarray of shape {shape} or DataFrame
            The series, one row per {period} in time order; a DataFrame (the
            same object as ``frame``) when ``as_frame=True``.
        feature_names : list of str
            The column names: {features}.
        dates : ndarray of shape ({n_rows},), dtype datetime64[D]
            The first day of each row's {period}.
        year : ndarray of shape ({n_rows},) of int
            The year of each row.{quarter}
        frame : DataFrame or None
            With ``as_frame=True``, the data indexed by ``dates``; otherwise
            None.
        DESCR : str
            Description of the data set: contents, source and licence.
"""

_PARAMETERS = """
    Parameters
    ----------
    as_frame : bool, default=False
        Return ``data`` and ``frame`` as a pandas DataFrame indexed by the
        dates.  Needs pandas (an :class:`ImportError` says so when it is
        absent).
"""


def _document(shape, period, features, n_rows, quarterly=False):
    """Complete a loader's docstring with the shared Parameters and Returns."""
    quarter = (
        f"\n        quarter : ndarray of shape ({n_rows},) of int\n"
        "            The quarter (1-4) of each row."
        if quarterly
        else ""
    )
    returns = _RETURNS.format(
        shape=shape, period=period, features=features, n_rows=n_rows, quarter=quarter
    )

    def decorate(loader):
        summary, examples = loader.__doc__.split("    Examples\n")
        loader.__doc__ = summary.rstrip() + "\n" + _PARAMETERS + returns + "\n    Examples\n"
        loader.__doc__ += examples
        return loader

    return decorate


@_document(
    "(203, 12)",
    "quarter",
    "``realgdp``, ``realcons``, ``realinv``, ``realgovt``, ``realdpi``, ``cpi``, "
    "``m1``, ``tbilrate``, ``unemp``, ``pop``, ``infl``, ``realint``",
    203,
    quarterly=True,
)
def load_us_macro(*, as_frame=False):
    """US quarterly macroeconomic data, 1959Q1-2009Q3 (203 quarters).

    Real GDP, consumption, investment and government spending (billions of
    chained 2005 dollars), real disposable income, CPI, M1, the 3-month
    T-bill rate, unemployment (%), population, inflation and the real interest
    rate.  Source: FRED (Federal Reserve Bank of St. Louis) and the Bureau of
    Labor Statistics, as distributed with statsmodels
    (``statsmodels.datasets.macrodata``); public domain (works of the United
    States government).

    Examples
    --------
    >>> from skseq.datasets import load_us_macro
    >>> macro = load_us_macro()
    >>> macro.data.shape
    (203, 12)
    >>> macro.feature_names[:3]
    ['realgdp', 'realcons', 'realinv']
    >>> str(macro.dates[0]), int(macro.year[-1]), int(macro.quarter[-1])
    ('1959-01-01', 2009, 3)
    """
    return _load("us_macro", as_frame)


@_document("(100, 1)", "year", "``volume``", 100)
def load_nile(*, as_frame=False):
    """Annual flow of the Nile at Aswan, 1871-1970 (10^8 cubic metres).

    A classic change-point series: the flow drops near 1898 (the first Aswan
    dam).  Source: Cobb (1978), Biometrika 65(2), 243-251, as distributed
    with statsmodels (``statsmodels.datasets.nile``); public domain.

    Examples
    --------
    >>> from skseq.datasets import load_nile
    >>> nile = load_nile()
    >>> nile.data.shape, int(nile.year[0])
    ((100, 1), 1871)
    """
    return _load("nile", as_frame)


@_document("(309, 1)", "year", "``sunactivity``", 309)
def load_sunspots(*, as_frame=False):
    """Yearly mean sunspot number, 1700-2008 (309 years).

    Source: NOAA National Geophysical Data Center, as distributed with
    statsmodels (``statsmodels.datasets.sunspots``); public domain.

    Examples
    --------
    >>> from skseq.datasets import load_sunspots
    >>> load_sunspots().data.shape
    (309, 1)
    """
    return _load("sunspots", as_frame)


@_document("(107, 1)", "year", "``count``", 107)
def load_earthquakes(*, as_frame=False):
    """Annual counts of major earthquakes (magnitude 7 or more), 1900-2006.

    The series of Zucchini, MacDonald and Langrock, *Hidden Markov Models for
    Time Series* (Table 1.1; first edition 2009, p. 4), the standard example
    of a Poisson HMM: its variance (51.6) far exceeds its mean (19.4), and
    its counts are serially correlated.  Counted by the U.S. Geological
    Survey's National Earthquake Information Center (a work of the United
    States government, public domain).  See ``DESCR`` for the provenance of
    the bundled copy.

    Examples
    --------
    >>> from skseq.datasets import load_earthquakes
    >>> quakes = load_earthquakes()
    >>> quakes.data.shape, int(quakes.year[0]), int(quakes.year[-1])
    ((107, 1), 1900, 2006)
    >>> round(float(quakes.data.mean()), 2)
    19.36
    """
    return _load("earthquakes", as_frame)


@_document(
    "(55, 5)",
    "quarter",
    "``lrm`` (log real money, M2), ``lry`` (log real income), ``lpy`` (log "
    "prices), ``ibo`` (bond rate), ``ide`` (deposit rate)",
    55,
    quarterly=True,
)
def load_danish_money(*, as_frame=False):
    """Danish money demand data, quarterly, 1974Q1-1987Q3 (55 quarters, 5 series).

    A small multivariate macroeconomic series: log real money, log real
    income, log prices and two interest rates, the data of Johansen and
    Juselius (1990), Oxford Bulletin of Economics and Statistics 52(2),
    169-210, the classic example of cointegration.  As distributed with
    statsmodels (``statsmodels.datasets.danish_data``), which states it is
    public domain.

    Examples
    --------
    >>> from skseq.datasets import load_danish_money
    >>> money = load_danish_money()
    >>> money.data.shape, money.feature_names
    ((55, 5), ['lrm', 'lry', 'lpy', 'ibo', 'ide'])
    >>> str(money.dates[-1])
    '1987-07-01'
    """
    return _load("danish_money", as_frame)
