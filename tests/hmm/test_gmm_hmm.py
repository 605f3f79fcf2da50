"""GMMHMM: agreement with hmmlearn, the exact M step of the mixture covariances, recovery."""

import warnings

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning

from skseq import GMMHMM
from skseq.inference import hmm_forward_backward

COVARIANCE_TYPES = ["diag", "spherical", "full", "tied"]


def set_parameters(model, parameters):
    for name, value in parameters.items():
        setattr(model, name, np.copy(value))
    return model


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_gmm_weights_and_means_equal_hmmlearn_and_covariances_are_the_exact_m_step(
    covariance_type,
):
    hmm = pytest.importorskip("hmmlearn.hmm")
    rng = np.random.default_rng(2)
    n_components, n_mix, n_features = 2, 3, 2
    X = rng.normal(size=(400, n_features))
    X[200:] += 4
    lengths = [150, 250]
    parameters = {
        "startprob_": rng.dirichlet(np.ones(n_components)),
        "transmat_": rng.dirichlet(np.ones(n_components), size=n_components),
        "weights_": rng.dirichlet(np.ones(n_mix), size=n_components),
        "means_": 2 * rng.normal(size=(n_components, n_mix, n_features)),
        "covars_": {
            "diag": rng.uniform(0.5, 2, (n_components, n_mix, n_features)),
            "spherical": rng.uniform(0.5, 2, (n_components, n_mix)),
            "full": np.tile(np.eye(n_features) + 0.2, (n_components, n_mix, 1, 1)),
            "tied": np.tile(np.eye(n_features) + 0.3, (n_components, 1, 1)),
        }[covariance_type],
    }
    models = []
    for cls in (hmm.GMMHMM, GMMHMM):
        model = cls(n_components, n_mix, covariance_type=covariance_type, n_iter=1, init_params="")
        set_parameters(model, parameters).fit(X, lengths=lengths)
        models.append(model)
    theirs, ours = models
    np.testing.assert_allclose(ours.monitor_.history[0], theirs.monitor_.history[0], rtol=1e-10)
    for name in ("startprob_", "transmat_", "weights_", "means_"):
        np.testing.assert_allclose(
            getattr(ours, name), getattr(theirs, name), rtol=1e-8, atol=1e-12
        )
    # The exact M step (scatter around the updated means) gains at least as much.
    assert ours.score(X, lengths=lengths) >= theirs.score(X, lengths=lengths) - 1e-9

    # Independent check of our covariances: responsibilities from scipy densities.
    start = GMMHMM(n_components, n_mix, covariance_type=covariance_type, init_params="")
    set_parameters(start, parameters)
    flat_type, flat_covars = start._flat_covars()
    flat_means = parameters["means_"].reshape(-1, n_features)
    full = {
        "spherical": lambda c: c[:, None, None] * np.eye(n_features),
        "diag": lambda c: np.stack([np.diag(v) for v in c]),
        "full": lambda c: c,
    }[flat_type](flat_covars)
    log_component = np.stack(
        [multivariate_normal(m, c).logpdf(X) for m, c in zip(flat_means, full)], axis=1
    ).reshape(-1, n_components, n_mix) + np.log(parameters["weights_"])
    log_frame = logsumexp(log_component, axis=2)
    posteriors = hmm_forward_backward(
        np.log(parameters["startprob_"]),
        np.log(parameters["transmat_"]),
        log_frame,
        lengths=lengths,
    ).posteriors
    resp = posteriors[:, :, None] * np.exp(log_component - log_frame[:, :, None])
    mix_sum = resp.sum(axis=0)
    for k in range(n_components):
        scatters = []
        for m in range(n_mix):
            centred = X - ours.means_[k, m]
            scatters.append((resp[:, k, m, None] * centred).T @ centred)
        scatters = np.array(scatters)
        if covariance_type == "full":  # default prior: denominator = responsibility
            np.testing.assert_allclose(
                ours.covars_[k], scatters / mix_sum[k, :, None, None], rtol=1e-9
            )
        elif covariance_type == "diag":
            expected = np.diagonal(scatters, axis1=1, axis2=2) / mix_sum[k, :, None]
            np.testing.assert_allclose(ours.covars_[k], expected, rtol=1e-9)
        elif covariance_type == "tied":  # default prior: denominator = state responsibility
            np.testing.assert_allclose(
                ours.covars_[k], scatters.sum(0) / mix_sum[k].sum(), rtol=1e-9
            )
        else:  # spherical, hmmlearn's default prior alpha = -(n_mix + 2) / 2
            traces = np.trace(scatters, axis1=1, axis2=2)
            alpha = -(n_mix + 2) / 2
            expected = traces / (n_features * (mix_sum[k] + 1) + 2 * (alpha + 1))
            np.testing.assert_allclose(ours.covars_[k], expected, rtol=1e-9)


def test_gmm_recovers_a_two_component_mixture():
    rng = np.random.default_rng(5)
    truth = GMMHMM(
        2,
        n_mix=2,
        covariance_type="diag",
        startprob_init=[0.5, 0.5],
        transmat_init=[[0.95, 0.05], [0.05, 0.95]],
        weights_init=[[0.5, 0.5], [0.3, 0.7]],
        means_init=[[[-6.0, 0.0], [-3.0, 0.0]], [[3.0, 0.0], [6.0, 0.0]]],
        covars_init=np.full((2, 2, 2), 0.5),
        n_iter=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        truth.fit(rng.normal(size=(4, 2)))
    X, _ = truth.sample(6000, random_state=3)
    model = GMMHMM(2, n_mix=2, n_iter=100, random_state=0).fit(X)
    found = np.sort(model.means_[:, :, 0].ravel())
    np.testing.assert_allclose(found, [-6, -3, 3, 6], atol=0.15)
    assert model.score(X) >= truth.score(X) - 1.0
