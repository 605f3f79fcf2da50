"""HMM fitting inputs: k-means on n_jobs threads."""

import numpy as np
import pytest
from sklearn.cluster import KMeans

from skseq import GMMHMM, GaussianHMM, PoissonHMM

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


# -- k-means initialisation threads -----------------------------------------------------


def test_kmeans_initialisation_runs_on_n_jobs_threads(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not any(info["user_api"] == "openmp" for info in threadpoolctl.threadpool_info()):
        pytest.skip("scikit-learn's KMeans runs without OpenMP here")
    seen = []
    fit = KMeans.fit

    def recording_fit(self, *args, **kwargs):
        openmp = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "openmp"]
        seen.append(max(info["num_threads"] for info in openmp))
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(KMeans, "fit", recording_fit)
    rng = np.random.default_rng(0)
    counts = rng.poisson(5, (100, 1))
    X = rng.normal(size=(100, 2))
    PoissonHMM(2, n_iter=1, random_state=0).fit(counts)
    GaussianHMM(2, n_iter=1, random_state=0).fit(X)
    GMMHMM(2, n_mix=2, n_iter=1, random_state=0).fit(X)
    assert seen == [1] * 5  # GMMHMM: one k-means over states, one per state
    seen.clear()
    PoissonHMM(2, n_iter=1, random_state=0, n_jobs=2).fit(counts)
    assert seen == [2]
