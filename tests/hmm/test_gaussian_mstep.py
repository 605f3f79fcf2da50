"""The Gaussian M step written once (GaussianHMM's states, GMMHMM's mixture
components): each helper against its formula evaluated directly on the rows."""

import numpy as np
import pytest

from skseq.hmm._gaussian import (
    keep_valid_covariances,
    map_covariance,
    map_means,
    weighted_scatter,
)

N_ROWS, N_FEATURES = 30, 3


def weighted_rows(seed, components):
    """Rows, responsibilities of shape (rows, *components), a centre far from
    the origin, and the moments about it."""
    rng = np.random.default_rng(seed)
    X = rng.normal(loc=50.0, size=(N_ROWS, N_FEATURES))
    responsibilities = rng.dirichlet(np.ones(int(np.prod(components))), size=N_ROWS)
    responsibilities = responsibilities.reshape((N_ROWS, *components))
    centre = X.mean(axis=0)
    centred = X - centre
    post = responsibilities.sum(axis=0)
    first = np.einsum("t...,td->...d", responsibilities, centred)
    second = np.einsum("t...,td,te->...de", responsibilities, centred, centred)
    return X, responsibilities, centre, post, first, second, rng


@pytest.mark.parametrize("components", [(2,), (2, 3)], ids=["states", "states x mixture"])
@pytest.mark.parametrize("seed", range(3))
def test_means_and_scatter_equal_their_sums_over_rows(components, seed):
    X, r, centre, post, first, second, rng = weighted_rows(seed, components)
    means_prior = rng.normal(loc=50.0, size=(*components, N_FEATURES))
    means_weight = rng.uniform(0.0, 2.0, size=components)
    previous = np.zeros((*components, N_FEATURES))
    responsible = np.ones(components, dtype=bool)
    means = map_means(
        post, first, means_prior - centre, means_weight, previous, responsible, centre
    )
    weighted_sum = np.einsum("t...,td->...d", r, X)
    expected = (means_weight[..., None] * means_prior + weighted_sum) / (means_weight + post)[
        ..., None
    ]
    np.testing.assert_allclose(means, expected, rtol=1e-12)
    responsible.flat[0] = False  # no responsibility: the previous mean
    kept = map_means(post, first, means_prior - centre, means_weight, previous, responsible, centre)
    assert np.all(kept.reshape(-1, N_FEATURES)[0] == 0.0)
    np.testing.assert_array_equal(
        kept.reshape(-1, N_FEATURES)[1:], means.reshape(-1, N_FEATURES)[1:]
    )

    m = expected  # the updated means, in data coordinates
    deviations = X[:, None] - m.reshape(-1, N_FEATURES)[None]  # (rows, components, D)
    flat_r = r.reshape(N_ROWS, -1)
    offset = (m - means_prior).reshape(-1, N_FEATURES)
    brute = np.einsum("tk,tkd,tke->kde", flat_r, deviations, deviations) + (
        means_weight.reshape(-1)[:, None, None] * offset[:, :, None] * offset[:, None, :]
    )
    brute = brute.reshape((*components, N_FEATURES, N_FEATURES))
    full = weighted_scatter(
        post, first, second, m - centre, means_prior - centre, means_weight, full=True
    )
    np.testing.assert_allclose(full, brute, rtol=1e-9, atol=1e-9)
    diagonal = np.diagonal(second, axis1=-2, axis2=-1)
    diag = weighted_scatter(
        post, first, diagonal, m - centre, means_prior - centre, means_weight, full=False
    )
    np.testing.assert_allclose(diag, np.diagonal(brute, axis1=-2, axis2=-1), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("components", [(2,), (2, 3)], ids=["states", "states x mixture"])
def test_map_covariance_per_type(components):
    rng = np.random.default_rng(7)
    root = rng.normal(size=(*components, N_FEATURES, N_FEATURES))
    scatter = root @ np.swapaxes(root, -1, -2)
    post = rng.uniform(1.0, 5.0, size=components)
    scale = np.eye(N_FEATURES) * 0.5
    nu = 2.0
    full = map_covariance("full", scatter, post, scale, nu)
    np.testing.assert_allclose(full, (scale + scatter) / (nu + post)[..., None, None])
    tied = map_covariance("tied", scatter, post, scale, nu)
    np.testing.assert_allclose(
        tied, (scale + scatter.sum(axis=-3)) / (nu + post.sum(-1))[..., None, None]
    )
    diagonal = np.diagonal(scatter, axis1=-2, axis2=-1)
    diag = map_covariance("diag", diagonal, post, 0.1, nu)
    np.testing.assert_allclose(diag, (0.1 + diagonal) / (nu + post)[..., None])
    spherical = map_covariance("spherical", diagonal, post, 0.1, nu)
    expected = (0.1 + diagonal.sum(axis=-1)) / (nu + N_FEATURES * post)
    np.testing.assert_allclose(spherical, expected)
    # Maximum likelihood (no prior): the weighted variance of each feature.
    np.testing.assert_allclose(
        map_covariance("diag", diagonal, post, 0.0, 0.0), diagonal / post[..., None]
    )
    floored = map_covariance("diag", diagonal, 0.0 * post, 0.0, 0.0, min_count=1e-5)
    np.testing.assert_allclose(floored, diagonal / 1e-5)


@pytest.mark.parametrize("components", [(3,), (2, 3)], ids=["states", "states x mixture"])
def test_unusable_covariances_keep_their_previous_values(components):
    eye = np.broadcast_to(np.eye(2), (*components, 2, 2))
    previous = 2.0 * eye
    new = 3.0 * eye.copy()
    responsible = np.ones(components, dtype=bool)
    responsible.flat[0] = False  # no responsibility: previous
    new.reshape(-1, 2, 2)[-1] = [[1.0, 2.0], [2.0, 1.0]]  # not positive definite: previous
    kept = keep_valid_covariances(new, previous, "full", responsible)
    flat = kept.reshape(-1, 2, 2)
    np.testing.assert_array_equal(flat[0], 2.0 * np.eye(2))
    np.testing.assert_array_equal(flat[-1], 2.0 * np.eye(2))
    np.testing.assert_array_equal(flat[1:-1], 3.0 * eye.reshape(-1, 2, 2)[1:-1])
    variances = np.full((*components, 2), 3.0)
    variances.reshape(-1, 2)[-1, 1] = -1.0  # not positive: previous
    kept = keep_valid_covariances(variances, np.ones_like(variances), "diag", responsible)
    assert kept.reshape(-1, 2)[0].tolist() == [1.0, 1.0]
    assert kept.reshape(-1, 2)[-1].tolist() == [3.0, 1.0]
    # "tied" pools the components: responsibility does not matter, validity does.
    tied = keep_valid_covariances(
        np.array([[1.0, 2.0], [2.0, 1.0]]), np.eye(2), "tied", responsible
    )
    np.testing.assert_array_equal(tied, np.eye(2))
