"""score and score_sequences over blocks of sequences in n_jobs threads equal one thread."""

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from skseq import GaussianHMM
from skseq.lds import LinearGaussianSSM


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=2, max_size=9).filter(lambda v: sum(v) >= 4),
    n_jobs=st.integers(2, 4),
    seed=st.integers(0, 2**16),
)
def test_scores_in_threads_equal_one_thread(lengths, n_jobs, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(sum(lengths), 2))
    weights = rng.uniform(size=sum(lengths))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = [
            GaussianHMM(2, n_iter=2, random_state=0).fit(X, lengths=lengths),
            LinearGaussianSSM(1, n_iter=2, random_state=0).fit(X, lengths=lengths),
        ]
    for model in models:
        serial = (
            model.score(X, lengths=lengths),
            model.score(X, lengths=lengths, sample_weight=weights),
            model.score_sequences(X, lengths=lengths),
        )
        model.set_params(n_jobs=n_jobs)
        threaded = (
            model.score(X, lengths=lengths),
            model.score(X, lengths=lengths, sample_weight=weights),
            model.score_sequences(X, lengths=lengths),
        )
        # The same kernels on the same sequences; only the sum's grouping
        # may differ, so the sums agree to rounding and the per-sequence
        # values exactly.
        np.testing.assert_allclose(threaded[0], serial[0], rtol=1e-12)
        np.testing.assert_allclose(threaded[1], serial[1], rtol=1e-12)
        np.testing.assert_array_equal(threaded[2], serial[2])
