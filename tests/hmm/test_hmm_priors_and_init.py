"""HMM fitting inputs: prior hyperparameters in their domain, k-means on n_jobs threads."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans

from skseq import GMMHMM, CategoricalHMM, GaussianHMM, MultinomialHMM, PoissonHMM

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


# -- priors and weights ---------------------------------------------------------------


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: PoissonHMM(2, lambdas_weight=-1e9), ValueError, "lambdas_weight must be >= 0"),
        (lambda: PoissonHMM(2, lambdas_prior=-1.0), ValueError, "lambdas_prior must be >= 0"),
        (lambda: PoissonHMM(2, lambdas_prior=[1.0, np.inf]), ValueError, "lambdas_prior.*finite"),
        (lambda: GaussianHMM(2, covars_weight=np.nan), ValueError, "covars_weight must be finite"),
        (lambda: GaussianHMM(2, covars_prior=-1.0), ValueError, "covars_prior must be >= 0"),
        (
            lambda: GaussianHMM(2, covariance_type="full", covars_prior=-0.1),
            ValueError,
            "covars_prior must be positive semidefinite",
        ),
        (
            lambda: GaussianHMM(2, covariance_type="tied", covars_prior=[[1.0, 2.0], [2.0, 1.0]]),
            ValueError,
            "covars_prior must be positive semidefinite",
        ),
        (lambda: GaussianHMM(2, means_weight=-1), ValueError, "means_weight must be >= 0"),
        (lambda: GaussianHMM(2, means_prior=np.nan), ValueError, "means_prior must be finite"),
        (lambda: GaussianHMM(2, startprob_prior=0.0), ValueError, "startprob_prior must be > 0"),
        (
            lambda: GaussianHMM(2, transmat_prior=[[1.0, -1.0], [1.0, 1.0]]),
            ValueError,
            "transmat_prior must be > 0",
        ),
        (lambda: GaussianHMM(2, transmat_prior="high"), TypeError, "transmat_prior must be a real"),
        (lambda: GMMHMM(2, weights_prior=-2.0), ValueError, "weights_prior must be > 0"),
        (
            lambda: GMMHMM(2, covariance_type="full", covars_weight=-10.0),
            ValueError,
            r"covars_weight must be >= -4.0",
        ),
        (lambda: GMMHMM(2, covariance_type="diag", covars_prior=-2.0), ValueError, ">= -1.5"),
        (lambda: GMMHMM(2, covariance_type="diag", covars_weight=-1.0), ValueError, ">= 0"),
        (
            lambda: CategoricalHMM(2, emissionprob_prior=0.0),
            ValueError,
            "emissionprob_prior must be > 0",
        ),
        (
            lambda: MultinomialHMM(2, emissionprob_prior=-1.0),
            ValueError,
            "emissionprob_prior must be > 0",
        ),
    ],
)
def test_prior_hyperparameters_are_validated_at_fit(make, error, message):
    model = make()
    X = (
        np.array([[0], [1], [2], [1]] * 10)
        if isinstance(model, (PoissonHMM, CategoricalHMM, MultinomialHMM))
        else np.random.default_rng(0).normal(size=(40, 2))
    )
    with pytest.raises(error, match=message):
        model.fit(X)
    with pytest.raises(error, match=message):
        clone(model).partial_fit(X)


def test_priors_at_their_bounds_fit():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    counts = rng.poisson(3, (80, 2))
    models = [
        (PoissonHMM(2, lambdas_prior=0.0, lambdas_weight=0.0, n_iter=3, random_state=0), counts),
        (PoissonHMM(2, lambdas_prior=[2.0, 1.0], lambdas_weight=5.0, n_iter=3), counts),
        (GaussianHMM(2, means_weight=0.0, covars_prior=0.0, n_iter=3, random_state=0), X),
        (
            GaussianHMM(2, covariance_type="full", covars_prior=[[1.0, 0.5], [0.5, 1.0]], n_iter=3),
            X,
        ),
        (GaussianHMM(2, startprob_prior=0.5, transmat_prior=0.5, n_iter=3), X),
        (GMMHMM(2, n_mix=2, covariance_type="full", n_iter=3, random_state=0), X),
        (GMMHMM(2, n_mix=2, covariance_type="tied", covars_weight=-5.0, n_iter=3), X),
    ]
    for model, data in models:
        model.fit(data)
        assert np.isfinite(model.score(data))
    # Later partial_fit calls validate a prior changed in between.
    stream = GaussianHMM(2, random_state=0).partial_fit(X[:40])
    with pytest.raises(ValueError, match="covars_weight must be finite"):
        stream.set_params(covars_weight=np.nan).partial_fit(X[40:])


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


def test_thread_libraries_loaded_after_the_first_limit_are_limited_too():
    """The cached thread-library lookup is refreshed when more modules have been imported.

    Here torch brings its own OpenMP runtime after skseq first limited the threads
    (as when a test imports torch after earlier fits): it must be limited as well.
    """
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    code = "\n".join(
        [
            "import threadpoolctl",
            "from skseq._parallel import limited_threads",
            "with limited_threads(1):",
            "    pass",
            "import torch",
            "with limited_threads(1):",
            "    info = threadpoolctl.threadpool_info()",
            "    openmp = [i['num_threads'] for i in info if i['user_api'] == 'openmp']",
            "assert openmp and max(openmp) == 1, info",
        ]
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "3"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
