"""skseq.inference.gaussian: densities, weighted moments and covariance shapes."""

import numpy as np
import pytest
from hmm_references import conditional_moments_by_hand
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import multivariate_normal

from skseq.inference.gaussian import (
    COVARIANCE_TYPES,
    _log_gaussian_density,
    _moment_features,
    _moments_from_features,
    _partial_moment_features,
    check_covars,
    compact_covars,
    compact_covars_shape,
    fill_covars,
    log_gaussian_density,
    weighted_moments,
)


def random_covars(rng, covariance_type, n_components, n_features):
    return {
        "diag": rng.uniform(0.5, 2.0, (n_components, n_features)),
        "spherical": rng.uniform(0.5, 2.0, n_components),
        "full": np.stack(
            [
                np.eye(n_features) + 0.3 * np.outer(v, v)
                for v in rng.normal(size=(n_components, n_features))
            ]
        ),
        "tied": np.eye(n_features) + 0.2,
    }[covariance_type]


@pytest.mark.parametrize("n_components", [1, 3, 12])
@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_log_gaussian_density_matches_scipy(n_components, covariance_type):
    rng = np.random.default_rng(n_components)
    means = rng.normal(scale=2.0, size=(n_components, 4))
    covars = random_covars(rng, covariance_type, n_components, 4)
    # The kernels work in blocks of 256 rows (eight rows at a time in the AVX2
    # builds): three blocks, the last one partial and not a multiple of eight,
    # with missing rows in two of them and partially observed rows in two.
    n_samples = 603
    X = rng.normal(scale=2.0, size=(n_samples, 4))
    X[[7, 300]] = np.nan
    X[[8, 599], 1] = np.nan
    full = fill_covars(covars, covariance_type, n_components, 4)
    expected = np.stack([multivariate_normal(m, c).logpdf(X) for m, c in zip(means, full)], axis=1)
    expected[[7, 300]] = 0.0  # a missing row has density 1
    seen = [0, 2, 3]  # a partially observed row: the marginal density of its observed entries
    expected[[8, 599]] = np.stack(
        [
            multivariate_normal(m[seen], c[np.ix_(seen, seen)]).logpdf(X[[8, 599]][:, seen])
            for m, c in zip(means, full)
        ],
        axis=1,
    )
    got = log_gaussian_density(X, means, covars, covariance_type).log_density
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    shift = np.empty(n_samples)
    shifted = _log_gaussian_density(X, means, covars, covariance_type, shift=shift)
    np.testing.assert_allclose(shifted + shift[:, None], expected, rtol=1e-12, atol=1e-12)
    assert np.all(shifted.max(axis=1) == 0.0)


@pytest.mark.parametrize("full", [False, True])
def test_weighted_moments_match_numpy(full):
    rng = np.random.default_rng(3)
    X = rng.normal(loc=5.0, size=(603, 4))  # three blocks of up to 256 rows
    X[[2, 300]] = np.nan
    X[602, 1] = np.nan  # partially observed
    X[5, [0, 3]] = np.nan
    weights = rng.random((603, 3))
    centre = np.array([5.0, 4.0, 6.0, 5.5])
    complete = ~np.isnan(X).any(axis=1)
    partial = np.array([5, 602])
    means = rng.normal(loc=5.0, size=(3, 4))
    covars = random_covars(rng, "full", 3, 4)
    y, w = X[complete] - centre, weights[complete]
    moments = weighted_moments(X, weights, centre=centre, full=full, means=means, covars=covars)
    weight_sums, first, second, missing_weight_sums = moments
    np.testing.assert_allclose(weight_sums, w.sum(axis=0) + weights[partial].sum(axis=0))
    expected_first = w.T @ y
    expected_second = np.einsum("tk,ti,tj->kij", w, y, y) if full else w.T @ y**2
    if full:  # the missing entries' conditional expectations under each component
        for t in partial:
            for k in range(3):
                e, ee = conditional_moments_by_hand(X[t], means[k], covars[k])
                e_centred = e - centre
                ee_centred = (
                    ee - np.outer(e, centre) - np.outer(centre, e) + np.outer(centre, centre)
                )
                expected_first[k] += weights[t, k] * e_centred
                expected_second[k] += weights[t, k] * ee_centred
        assert missing_weight_sums is None
    else:  # the missing entries drop out of their features' sums
        y_partial = np.nan_to_num(X[partial] - centre)
        expected_first += weights[partial].T @ y_partial
        expected_second += weights[partial].T @ y_partial**2
        np.testing.assert_allclose(
            missing_weight_sums, weights[partial].T @ np.isnan(X[partial]), rtol=1e-12
        )
    np.testing.assert_allclose(first, expected_first, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(second, expected_second, rtol=1e-12, atol=1e-10)
    # The moment features summed with the weights are the same moments.
    row_features = _moment_features(X, centre, full)
    features = np.repeat(row_features[:, None], 3, axis=1)
    if full:  # per component for the partially observed rows
        features[partial] = _partial_moment_features(X[partial], centre, means, covars, "full")
    from_features = _moments_from_features(np.einsum("tk,tkf->kf", weights, features), 4, full)
    for got, want in zip(from_features, moments):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-10)


def test_weighted_moments_need_the_parameters_for_full_partial_rows():
    X = np.array([[1.0, 2.0], [3.0, np.nan]])
    with pytest.raises(ValueError, match="need means and covars"):
        weighted_moments(X, np.ones((2, 1)), full=True)


def test_weighted_moments_default_centre_is_the_origin():
    X = np.array([[1.0, 2.0], [3.0, -1.0]])
    moments = weighted_moments(X, np.array([[1.0], [0.5]]))
    np.testing.assert_allclose(moments.first, [[2.5, 1.5]])
    np.testing.assert_allclose(moments.second, [[5.5, 4.5]])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    covariance_type=st.sampled_from(COVARIANCE_TYPES),
    n_components=st.integers(1, 4),
    n_features=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_compact_and_full_covariances_round_trip(covariance_type, n_components, n_features, seed):
    covars = random_covars(np.random.default_rng(seed), covariance_type, n_components, n_features)
    assert covars.shape == compact_covars_shape(covariance_type, n_components, n_features)
    full = fill_covars(covars, covariance_type, n_components, n_features)
    assert full.shape == (n_components, n_features, n_features)
    np.testing.assert_array_equal(compact_covars(full, covariance_type), covars)
    np.testing.assert_array_equal(
        check_covars(covars, covariance_type, n_components, n_features), covars
    )


def test_compact_covars_refuses_what_the_type_cannot_hold():
    with pytest.raises(ValueError, match="must be diagonal"):
        compact_covars(np.array([[[1.0, 0.1], [0.1, 1.0]]]), "diag")
    with pytest.raises(ValueError, match="multiples of I"):
        compact_covars(np.array([np.diag([1.0, 2.0])]), "spherical")
    with pytest.raises(ValueError, match="must all be equal"):
        compact_covars(np.array([np.eye(2), 2 * np.eye(2)]), "tied")


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        (dict(covariance_type="banana"), ValueError, "covariance_type must be one of"),
        (dict(X=np.ones(3)), ValueError, "X must be 2-D"),
        (dict(X=np.array([[np.inf, 0.0]])), ValueError, "X contains infinity"),
        (dict(X=np.ones((2, 2)) * 1j), TypeError, "X must be real"),
        (dict(means=np.zeros((1, 3))), ValueError, r"means must have shape \(n_components, 2\)"),
        (dict(means=np.array([[np.nan, 0.0]])), ValueError, "means contains NaN"),
        (dict(covars=np.ones((2, 2))), ValueError, "covars for covariance_type='diag'"),
        (dict(covars=np.array([[1.0, -1.0]])), ValueError, "must be positive"),
        (
            dict(covars=np.array([[[1.0, 2.0], [2.0, 1.0]]]), covariance_type="full"),
            ValueError,
            "not positive definite",
        ),
    ],
)
def test_log_gaussian_density_names_bad_input(arguments, error, message):
    call = dict(X=np.zeros((2, 2)), means=np.zeros((1, 2)), covars=np.ones((1, 2)))
    call.update(covariance_type="diag")
    call.update(arguments)
    with pytest.raises(error, match=message):
        log_gaussian_density(**call)


def test_weighted_moments_names_bad_input_and_leaves_inputs_unchanged():
    X = np.array([[1.0, 2.0], [np.nan, 0.0]])
    weights = np.ones((2, 1))
    with pytest.raises(ValueError, match=r"weights must have shape \(2, n_components\)"):
        weighted_moments(X, np.ones((3, 1)))
    with pytest.raises(ValueError, match="weights contains NaN"):
        weighted_moments(X, np.array([[np.nan], [1.0]]))
    with pytest.raises(ValueError, match=r"centre must have shape \(2,\)"):
        weighted_moments(X, weights, centre=[0.0])
    with pytest.raises(TypeError, match="full must be a bool"):
        weighted_moments(X, weights, full=1)
    before = X.copy()
    weighted_moments(
        X, weights, centre=[1.0, 1.0], full=True, means=[[0.0, 0.0]], covars=[np.eye(2)]
    )
    np.testing.assert_array_equal(X, before)
    with pytest.raises(ValueError, match=r"means must have shape \(1, 2\)"):
        weighted_moments(X, weights, full=True, means=[0.0, 0.0], covars=[np.eye(2)])


def test_a_row_beyond_double_precision_is_an_error_not_minus_inf():
    X = np.array([[0.0], [1e300]])
    with pytest.raises(ValueError, match="too far from every Gaussian component"):
        log_gaussian_density(X, np.zeros((1, 1)), np.full((1, 1), 1e-300), "diag")
