"""The bundled data sets: contents, Bunch layout, as_frame, provenance."""

import builtins
import sys

import numpy as np
import pytest

from skseq import datasets
from skseq.datasets import (
    load_danish_money,
    load_earthquakes,
    load_nile,
    load_sunspots,
    load_us_macro,
)

# loader, shape, first date, last date, quarterly
LOADERS = [
    (load_us_macro, (203, 12), "1959-01-01", "2009-07-01", True),
    (load_nile, (100, 1), "1871-01-01", "1970-01-01", False),
    (load_sunspots, (309, 1), "1700-01-01", "2008-01-01", False),
    (load_earthquakes, (107, 1), "1900-01-01", "2006-01-01", False),
    (load_danish_money, (55, 5), "1974-01-01", "1987-07-01", True),
]
IDS = [loader.__name__ for loader, *_ in LOADERS]


def test_every_public_loader_is_tested():
    assert sorted(datasets.__all__) == sorted(IDS)


@pytest.mark.parametrize(("loader", "shape", "first", "last", "quarterly"), LOADERS, ids=IDS)
def test_loader_returns_a_bunch_of_a_regular_series(loader, shape, first, last, quarterly):
    bunch = loader()
    assert bunch.data.shape == shape and bunch.data.dtype == np.float64
    assert np.all(np.isfinite(bunch.data))
    assert len(bunch.feature_names) == shape[1]
    assert bunch.frame is None
    assert bunch.dates.dtype == np.dtype("datetime64[D]") and bunch.dates.shape == (shape[0],)
    assert (str(bunch.dates[0]), str(bunch.dates[-1])) == (first, last)
    # One row per period, none missing: consecutive years or quarters.
    steps = np.diff(bunch.dates.astype("datetime64[M]").astype(int))
    assert np.all(steps == (3 if quarterly else 12))
    assert np.array_equal(bunch.year, bunch.dates.astype("datetime64[Y]").astype(int) + 1970)
    if quarterly:
        months = bunch.dates.astype("datetime64[M]").astype(int) % 12
        assert np.array_equal(bunch.quarter, months // 3 + 1)
    else:
        assert "quarter" not in bunch


@pytest.mark.parametrize(("loader", "shape", "first", "last", "quarterly"), LOADERS, ids=IDS)
def test_descr_states_the_source_and_the_licence(loader, shape, first, last, quarterly):
    descr = loader().DESCR
    assert "Source:" in descr and "Licence:" in descr
    assert "public domain" in descr.split("Licence:")[1]
    # The docstring documents the same Bunch fields the loader returns.
    for field in ("data", "feature_names", "dates", "year", "frame", "DESCR", "as_frame"):
        assert field in loader.__doc__


@pytest.mark.parametrize(("loader", "shape", "first", "last", "quarterly"), LOADERS, ids=IDS)
def test_as_frame_gives_the_same_numbers_indexed_by_date(loader, shape, first, last, quarterly):
    pd = pytest.importorskip("pandas")
    plain, framed = loader(), loader(as_frame=True)
    assert isinstance(framed.frame, pd.DataFrame) and framed.data is framed.frame
    assert list(framed.frame.columns) == plain.feature_names
    np.testing.assert_array_equal(framed.frame.to_numpy(), plain.data)
    assert isinstance(framed.frame.index, pd.DatetimeIndex)
    np.testing.assert_array_equal(
        framed.frame.index.to_numpy().astype("datetime64[D]"), plain.dates
    )


def test_as_frame_without_pandas_says_what_is_missing(monkeypatch):
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "pandas", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError, match="as_frame=True needs pandas"):
        load_nile(as_frame=True)
    assert load_nile().data.shape == (100, 1)  # without as_frame, pandas is not needed


def test_as_frame_must_be_a_bool():
    with pytest.raises(TypeError, match="as_frame"):
        load_nile(as_frame="yes")
    with pytest.raises(TypeError):
        load_nile(True)  # keyword-only, as in scikit-learn's loaders


def test_earthquake_counts_are_the_zucchini_macdonald_series():
    counts = load_earthquakes().data[:, 0]
    assert np.array_equal(counts, np.round(counts)) and counts.min() >= 0
    # The summary statistics the book reports (mean 19.36, variance 51.57),
    # and a few values of its Table 1.1.
    assert counts.mean() == pytest.approx(19.364, abs=1e-3)
    assert counts.var(ddof=1) == pytest.approx(51.573, abs=1e-3)
    assert (counts[0], counts[43], counts[-1], counts.max(), counts.min()) == (13, 41, 11, 41, 6)
    assert int(load_earthquakes().year[np.argmax(counts)]) == 1943


def test_danish_money_is_the_johansen_juselius_data():
    money = load_danish_money()
    assert money.feature_names == ["lrm", "lry", "lpy", "ibo", "ide"]
    np.testing.assert_allclose(
        money.data[0], [11.63255023, 5.903658491, -0.618735936, 0.1547356, 0.094]
    )
    assert np.all((money.data[:, 3:] > 0) & (money.data[:, 3:] < 1))  # rates as fractions


def test_loaders_return_fresh_arrays():
    first = load_nile()
    first.data[:] = 0
    assert load_nile().data[0, 0] == 1120.0


@pytest.mark.parametrize(
    ("loader", "module", "columns"),
    [
        (load_us_macro, "macrodata", slice(2, None)),
        (load_nile, "nile", slice(1, None)),
        (load_sunspots, "sunspots", slice(1, None)),
        (load_danish_money, "danish_data", slice(None)),
    ],
    ids=["us_macro", "nile", "sunspots", "danish_money"],
)
def test_bundled_copies_equal_statsmodels(loader, module, columns):
    pytest.importorskip("pandas")
    statsmodels_datasets = pytest.importorskip("statsmodels.datasets")
    theirs = getattr(statsmodels_datasets, module).load_pandas().data
    np.testing.assert_allclose(loader().data, theirs.to_numpy(dtype=float)[:, columns])
