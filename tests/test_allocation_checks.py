"""Sizes that no memory holds are refused before allocating (issue 17, section 2).

An argument that sets the size of an output (a kernel's length, a number of
samples or forecast steps, a CategoricalHMM's alphabet) gets a ValueError
naming it, not numpy's ``MemoryError``; symbols that are not codes 0..n-1 are
pointed to ``LabelEncoder``.
"""

import numpy as np
import pytest

from skseq import CategoricalHMM, GaussianHMM, LinearGaussianSSM
from skseq._validation import check_allocation, format_bytes
from skseq.inference import s4d_kernel, sample_hmm_states
from skseq.inference.kalman import LGSSMParameters, kalman_forecast, sample_lgssm

# -- allocations that cannot fit --------------------------------------------------------


def test_check_allocation_counts_exact_bytes():
    assert check_allocation((3, 5), np.float32, argument="n=5", what="it") == 60
    with pytest.raises(
        ValueError,
        match=r"^n=5 is too large: it would need 60 bytes, more than "
        r"the 59 bytes of memory",
    ):
        check_allocation((3, 5), np.float32, argument="n=5", what="it", limit=59)
    # far beyond any memory, and beyond int64 (Python integers do not overflow)
    with pytest.raises(ValueError, match="is too large"):
        check_allocation((10**12, 10**12), np.float64, argument="n", what="it")
    assert format_bytes(21 * 2**50) == "21 PiB"


def test_s4d_kernel_refuses_a_length_no_memory_holds():
    with pytest.raises(
        ValueError,
        match=r"^length=1000000000000000 is too large: the kernel K .* "
        r"would need 21.3 PiB",
    ):
        s4d_kernel(
            log_dt=np.zeros(3),
            A=-np.ones((3, 2)),
            B=np.ones((3, 2)),
            C=np.ones((3, 2)),
            length=10**15,
        )


def test_sampling_and_forecasting_refuse_lengths_no_memory_holds():
    with pytest.raises(ValueError, match="^n_samples=1000000000000000 is too large"):
        sample_hmm_states([1.0], [[1.0]], 10**15, random_state=0)
    with pytest.raises(ValueError, match="^n_samples=1000000000000000 is too large"):
        sample_lgssm(LGSSMParameters([[0.9]], [[1.0]], [[0.1]], [[0.5]]), 10**15, random_state=0)
    with pytest.raises(ValueError, match="^n_steps=1000000000000000 is too large"):
        kalman_forecast(
            LGSSMParameters([[0.9]], [[1.0]], [[0.1]], [[0.5]]), np.ones((3, 1)), 10**15
        )


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimators_sample_and_forecast_only_what_memory_holds():
    X = np.random.default_rng(0).normal(size=(30, 1))
    hmm = GaussianHMM(n_components=2, n_iter=2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="^n_samples=1000000000000000 is too large"):
        hmm.sample(10**15)
    lgssm = LinearGaussianSSM(n_components=1, n_iter=2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="^n_samples=1000000000000000 is too large"):
        lgssm.sample(10**15)
    with pytest.raises(ValueError, match="^n_steps=1000000000000000 is too large"):
        lgssm.forecast(X, 10**15)
    # sizes that fit are drawn as before
    assert hmm.sample(5)[0].shape == (5, 1) and lgssm.sample(5)[0].shape == (5, 1)


# -- CategoricalHMM: symbols that are not codes 0..n-1 ------------------------------------


@pytest.mark.parametrize("symbol", [10**9, 1e300])
def test_categorical_hmm_points_raw_symbols_to_label_encoder(symbol):
    X = np.array([[0.0], [1.0], [symbol], [1.0]])
    with pytest.raises(ValueError) as error:
        CategoricalHMM(n_components=2, random_state=0).fit(X)
    message = str(error.value)
    assert "implies an alphabet of" in message
    assert "sklearn.preprocessing.LabelEncoder" in message and "n_features" in message
    if symbol == 10**9:
        assert "alphabet of 1000000001 symbols" in message


@pytest.mark.filterwarnings("ignore:Fitting a model with")
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_categorical_hmm_keeps_large_alphabets_that_are_meant():
    # symbols beyond the number of rows, with a small table, are fitted as before
    X = np.array([[0], [5000], [17], [5000], [3]])
    model = CategoricalHMM(n_components=2, n_iter=2, random_state=0).fit(X)
    assert model.n_symbols_ == 5001
    # a declared alphabet is not limited by the rows, only by the memory
    model = CategoricalHMM(n_components=2, n_features=20000, n_iter=1, random_state=0).fit(X)
    assert model.n_symbols_ == 20000
    with pytest.raises(
        ValueError,
        match=r"^n_features=1000000000000 is too large: the emission "
        r"table of shape \(2, 1, 1000000000000\)",
    ):
        CategoricalHMM(n_components=2, n_features=10**12, random_state=0).fit(X)
