"""Setup shared by the tests of the neural estimators."""

import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning


@pytest.fixture(autouse=True)
def _quiet_convergence():
    """Short test fits stop at max_iter on purpose: their ConvergenceWarning is noise.

    A test that checks the warning asks for it with ``pytest.warns`` (which
    records whatever the filters say) or turns it into an error itself.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield
