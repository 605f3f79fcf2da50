"""Loaders of the bundled data sets."""

from importlib import resources

import numpy as np
from sklearn.utils import Bunch

__all__ = ["load_us_macro", "load_nile", "load_sunspots"]


def _read_csv(name):
    with resources.files("skseq.datasets").joinpath("data", name).open("r") as handle:
        header = [field.strip('"') for field in handle.readline().strip().split(",")]
        values = np.loadtxt(handle, delimiter=",", ndmin=2)
    return header, values


def load_us_macro():
    """US quarterly macroeconomic data, 1959Q1-2009Q3 (203 quarters).

    Real GDP, consumption, investment and government spending (billions of
    chained 2005 dollars), real disposable income, CPI, M1, the 3-month
    T-bill rate, unemployment (%), population, inflation and the real interest
    rate.  Source: FRED (Federal Reserve Bank of St. Louis) and the Bureau of
    Labor Statistics; public domain.

    Returns
    -------
    data : Bunch
        ``data`` (203, 12) float array, ``feature_names``, ``year`` and
        ``quarter`` (203,) integer arrays, ``DESCR``.

    Examples
    --------
    >>> from skseq.datasets import load_us_macro
    >>> macro = load_us_macro()
    >>> macro.data.shape
    (203, 12)
    >>> macro.feature_names[:3]
    ['realgdp', 'realcons', 'realinv']
    """
    header, values = _read_csv("us_macro.csv")
    return Bunch(
        data=values[:, 2:],
        feature_names=header[2:],
        year=values[:, 0].astype(int),
        quarter=values[:, 1].astype(int),
        DESCR=load_us_macro.__doc__,
    )


def load_nile():
    """Annual flow of the Nile at Aswan, 1871-1970 (10^8 cubic metres).

    A classic change-point series: the flow drops near 1898 (the first Aswan
    dam).  Source: Cobb (1978), Biometrika 65(2); public domain.

    Returns
    -------
    data : Bunch
        ``data`` (100, 1) float array, ``year`` (100,) integer array, ``DESCR``.

    Examples
    --------
    >>> from skseq.datasets import load_nile
    >>> load_nile().data.shape
    (100, 1)
    """
    _, values = _read_csv("nile.csv")
    return Bunch(data=values[:, 1:], year=values[:, 0].astype(int), DESCR=load_nile.__doc__)


def load_sunspots():
    """Yearly mean sunspot number, 1700-2008 (309 years).

    Source: NOAA National Geophysical Data Center; public domain.

    Returns
    -------
    data : Bunch
        ``data`` (309, 1) float array, ``year`` (309,) integer array, ``DESCR``.

    Examples
    --------
    >>> from skseq.datasets import load_sunspots
    >>> load_sunspots().data.shape
    (309, 1)
    """
    _, values = _read_csv("sunspots.csv")
    return Bunch(data=values[:, 1:], year=values[:, 0].astype(int), DESCR=load_sunspots.__doc__)
