"""Masked arrays (numpy's and pykalman's missing values) in every estimator.

Where missing data are supported, a masked entry is a missing value exactly
like NaN; elsewhere a masked array with a masked entry is an error, never
silently read as observed.
"""

import copy
import importlib
import inspect
import pkgutil

import numpy as np
import pytest
from sklearn.base import clone

from skseq import (
    GMMHMM,
    AdditiveUnscentedKalmanFilter,
    CategoricalHMM,
    ExtendedKalmanFilter,
    GaussianHMM,
    LinearGaussianSSM,
    MultinomialHMM,
    PoissonHMM,
    SelectiveSSMRegressor,
    SemiMarkovGaussianHMM,
    UnobservedComponents,
    UnscentedKalmanFilter,
    inference,
)
from skseq.datasets import load_nile
from skseq.inference import gaussian, kalman, kalman_mle, nonlinear, subspace
from skseq.inference.kalman import LGSSMParameters, kalman_filter

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

MISSING_YEARS = [3, 10, 11, 12, 30, 47, 48, 61, 80, 99]


def nile_versions():
    """The Nile flow unmasked, with ten years masked, and with the same years NaN."""
    flow = load_nile().data
    mask = np.zeros(flow.shape, dtype=bool)
    mask[MISSING_YEARS] = True
    as_nan = flow.copy()
    as_nan[mask] = np.nan
    return flow, np.ma.masked_array(flow, mask=mask), as_nan


# -- masked arrays ----------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        GaussianHMM(2, n_iter=20, random_state=0),
        GMMHMM(2, n_mix=2, n_iter=20, random_state=0),
        LinearGaussianSSM(n_iter=20, random_state=0),
        SemiMarkovGaussianHMM(2, max_duration=40, n_iter=20, random_state=0),
    ],
    ids=["GaussianHMM", "GMMHMM", "LinearGaussianSSM", "SemiMarkovGaussianHMM"],
)
def test_masked_nile_years_are_missing_like_nan(model):
    flow, masked, as_nan = nile_versions()
    masked_copy = masked.copy()
    on_masked = clone(model).fit(masked)
    on_nan = clone(model).fit(as_nan)
    assert on_masked.score(masked) == on_nan.score(as_nan)
    assert on_masked.score(masked) != on_masked.score(flow)
    assert on_nan.score(masked) == on_nan.score(as_nan)
    assert on_masked.lower_bound_ == on_nan.lower_bound_
    # The caller's masked array is not changed.
    np.testing.assert_array_equal(masked.data, masked_copy.data)
    np.testing.assert_array_equal(masked.mask, masked_copy.mask)
    # A masked array with nothing masked is the plain data.
    unmasked = np.ma.masked_array(flow, mask=np.zeros_like(flow, dtype=bool))
    assert on_nan.score(unmasked) == on_nan.score(flow)


def test_unobserved_components_takes_masked_years_as_missing():
    flow, masked, as_nan = nile_versions()
    on_masked = UnobservedComponents("local level").fit(masked)
    on_nan = UnobservedComponents("local level").fit(as_nan[:, 0])
    assert on_masked.log_likelihood_ == on_nan.log_likelihood_
    assert on_masked.params_ == on_nan.params_
    assert on_nan.score(masked) == on_nan.score(as_nan)
    assert on_nan.score(masked) != on_nan.score(flow)


def test_masked_nile_log_likelihood_equals_pykalman():
    pykalman = pytest.importorskip("pykalman")
    _, masked, _ = nile_versions()
    model = LinearGaussianSSM(n_iter=10, random_state=0).fit(masked)
    theirs = pykalman.KalmanFilter(
        transition_matrices=model.transition_matrix_,
        observation_matrices=model.observation_matrix_,
        transition_covariance=model.transition_covariance_,
        observation_covariance=model.observation_covariance_,
        transition_offsets=model.transition_offset_,
        observation_offsets=model.observation_offset_,
        initial_state_mean=model.initial_state_mean_,
        initial_state_covariance=model.initial_state_covariance_,
    )
    np.testing.assert_allclose(model.score(masked), theirs.loglikelihood(masked), rtol=1e-10)
    means, _ = model.filter(masked)
    np.testing.assert_allclose(means, theirs.filter(masked)[0], rtol=1e-9)
    # filter_update takes a masked observation too (pykalman's online filter does).
    model.reset_filter()
    for row in masked[:12]:
        mean, _ = model.filter_update(row)
    np.testing.assert_allclose(mean, means[11], rtol=1e-12)


@pytest.mark.parametrize(
    "cls", [UnscentedKalmanFilter, AdditiveUnscentedKalmanFilter, ExtendedKalmanFilter]
)
def test_masked_nile_years_are_missing_in_the_nonlinear_filters(cls):
    """The local level model at Durbin & Koopman's estimates, as a nonlinear filter."""
    flow, masked, as_nan = nile_versions()
    masked_copy = masked.copy()
    additive = cls is not UnscentedKalmanFilter
    level = (lambda z: z) if additive else (lambda z, noise: z + noise)
    model = cls(level, level, [[1469.1]], [[15099.0]], [1120.0], [[1e7]])
    assert model.score(masked) == model.score(as_nan) != model.score(flow)
    np.testing.assert_array_equal(model.smooth(masked)[0], model.smooth(as_nan)[0])
    np.testing.assert_array_equal(masked.mask, masked_copy.mask)
    pykalman = pytest.importorskip("pykalman")
    theirs = (
        pykalman.UnscentedKalmanFilter if not additive else (pykalman.AdditiveUnscentedKalmanFilter)
    )
    reference = theirs(level, level, [[1469.1]], [[15099.0]], [1120.0], [[1e7]])
    np.testing.assert_allclose(model.smooth(masked)[0], reference.smooth(masked)[0], rtol=1e-9)


def test_masked_entries_follow_each_models_missing_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    mask = np.zeros_like(X, dtype=bool)
    mask[5, 0] = mask[20, 1] = True
    masked = np.ma.masked_array(X, mask=mask)
    # GaussianHMM, like the linear-Gaussian SSM, uses the observed entries of a row.
    hmm = GaussianHMM(2, n_iter=3, random_state=0).fit(X)
    whole_rows = X.copy()
    whole_rows[[5, 20]] = np.nan
    assert hmm.score(masked) == hmm.score(np.where(mask, np.nan, X))
    assert hmm.score(masked) < hmm.score(whole_rows)  # the observed entries have density < 1
    # The linear-Gaussian SSM uses the observed entries of a row.
    lgssm = LinearGaussianSSM(n_components=2, n_iter=3, random_state=0).fit(X)
    entries = np.where(mask, np.nan, X)
    assert lgssm.score(masked) == lgssm.score(entries)
    assert lgssm.score(masked) != lgssm.score(whole_rows)
    parameters = {
        name: getattr(lgssm, f"{name}_")
        for name in (
            "transition_matrix",
            "observation_matrix",
            "transition_covariance",
            "observation_covariance",
        )
    }
    result = kalman_filter(LGSSMParameters(**parameters), masked)
    assert (
        result.log_likelihood
        == kalman_filter(LGSSMParameters(**parameters), entries).log_likelihood
    )
    with pytest.raises(ValueError, match="controls.*masked"):
        LinearGaussianSSM(n_iter=2).fit(X, controls=np.ma.masked_array(X, mask=mask))


@pytest.mark.parametrize(
    "make, X",
    [
        (
            lambda: MultinomialHMM(2),
            np.ma.masked_array([[1, 2], [3, 0], [2, 1]], mask=[[0, 0], [1, 0], [0, 0]]),
        ),
        (
            lambda: SelectiveSSMRegressor(max_iter=1),
            np.ma.masked_array(np.ones((4, 5)), mask=np.eye(4, 5, dtype=bool)),
        ),
    ],
    ids=["MultinomialHMM", "SelectiveSSMRegressor"],
)
def test_masked_entries_where_missing_data_are_not_supported_raise(make, X):
    model = make()
    with pytest.raises(ValueError, match="does not support missing values.*masked entr"):
        if isinstance(model, SelectiveSSMRegressor):
            model.fit(X, np.ones(X.shape[0]))
        else:
            model.fit(X)


@pytest.mark.parametrize(
    "model, X",
    [
        (PoissonHMM(2, n_iter=2, random_state=0), [[1.0, 4.0], [2.0, 5.0], [3.0, 1.0], [6.0, 0.0]]),
        (CategoricalHMM(2, n_iter=2, random_state=0), [[0, 1], [1, 1], [1, 0], [0, 0]]),
    ],
    ids=["PoissonHMM", "CategoricalHMM"],
)
def test_masked_entries_of_counts_and_symbols_are_missing_entries(model, X):
    X = np.array(X, dtype=np.float64)
    mask = np.zeros(X.shape, dtype=bool)
    mask[1, 0] = True
    as_nan = np.where(mask, np.nan, X)
    model.fit(as_nan)
    assert model.score(np.ma.masked_array(X, mask=mask)) == model.score(as_nan)


# -- the inference functions ---------------------------------------------------------


def _inference_examples():
    """Valid arguments of every public inference function, fresh at each call.

    Every array argument is given (an optional one too), so that each can be
    masked; the functions taking a message or spectra of an earlier call get
    one.  Two calls of causal_convolution_backward: on (u, K) and on spectra.
    """
    rng = np.random.default_rng(0)
    # an AR(1) seen in noise: one state the subspace estimate finds (its own generator,
    # so the other examples keep their numbers)
    ar_rng = np.random.default_rng(1)
    ar_state = np.zeros(200)
    for t in range(1, 200):
        ar_state[t] = 0.9 * ar_state[t - 1] + ar_rng.normal()
    ar_data = np.outer(ar_state, [1.0, 0.5]) + 0.3 * ar_rng.normal(size=(200, 2))
    q, k, v = rng.normal(size=(3, 1, 2, 4, 3))
    attention_out, lse = inference.causal_attention(q, k, v, return_lse=True)
    log_frame = np.log(rng.uniform(0.1, 1.0, size=(3, 2)))
    hmm = dict(
        log_startprob=np.log([0.4, 0.6]),
        log_transmat=np.log([[0.7, 0.3], [0.2, 0.8]]),
        log_frameprob=log_frame,
    )
    hsmm = dict(
        log_startprob=np.log([0.4, 0.6]),
        log_transmat=np.array([[-np.inf, 0.0], [0.0, -np.inf]]),
        log_durationprob=np.log([[0.5, 0.5], [0.2, 0.8]]),
        log_frameprob=log_frame,
    )
    carried = inference.hmm_forward_smoothing(**hmm, features=np.ones((3, 1))).carried
    varying = dict(
        log_startprob=hmm["log_startprob"],
        log_transmats=np.log(rng.dirichlet([1.0, 1.0], size=(3, 2))),
        log_frameprob=log_frame,
        lengths=np.array([2, 1]),
    )
    driven = dict(
        coefs=rng.normal(size=(2, 2, 1)),
        intercepts=np.log([[0.7, 0.3], [0.2, 0.8]]),
        controls=rng.normal(size=(3, 1)),
    )
    X = rng.normal(size=(5, 2))
    lgssm = dict(
        transition_matrix=np.array([[0.9]]),
        observation_matrix=np.array([[1.0], [0.5]]),
        transition_covariance=np.array([[0.2]]),
        observation_covariance=np.eye(2),
        transition_offset=np.array([0.1]),
        observation_offset=np.array([0.0, 0.2]),
        initial_state_mean=np.array([0.3]),
        initial_state_covariance=np.array([[2.0]]),
        control_matrix=np.array([[0.5]]),
    )
    controls = rng.normal(size=(5, 1))
    lgssm_parameters = LGSSMParameters(**lgssm)
    stream = kalman.kalman_forward_smoothing(lgssm_parameters, X, controls=controls).carried
    lgssm_rows = dict(parameters=lgssm_parameters, X=X, controls=controls, lengths=np.array([3, 2]))
    parameterization = kalman_mle.LGSSMParameterization(
        lgssm_parameters,
        {
            "transition_matrix": kalman_mle.FreeEntries(),
            "observation_covariance": kalman_mle.LogVariances(),
        },
    )
    mle_rows = dict(
        parameterization=parameterization, X=X, controls=controls, lengths=np.array([3, 2])
    )
    x = rng.normal(size=(2, 5, 3))
    rnn = dict(
        x=x,
        W_x=rng.normal(size=(4, 3)) / 2,
        W_h=rng.normal(size=(4, 4)) / 4,
        b=rng.normal(size=4),
        h0=rng.normal(size=(2, 4)),
    )
    hidden = inference.elman_rnn(**rnn).hidden
    s4d_parameters = dict(
        log_dt=np.log([0.1, 0.2]),
        A=np.array([[-0.5 + 1j], [-1.0 + 2j]]),
        B=np.array([[1.0 + 0j], [0.5 + 0j]]),
        C=np.array([[1.0 - 1j], [0.2 + 0.3j]]),
    )
    u = rng.normal(size=(2, 2, 6))
    K = inference.s4d_kernel(**s4d_parameters, length=6).K
    spectra = inference.causal_convolution(u, K, return_spectra=True).spectra
    scan = dict(
        u=u,
        delta=rng.uniform(0.1, 0.5, size=(2, 2, 6)),
        A=-rng.uniform(0.5, 1.0, size=(2, 3)),
        B=rng.normal(size=(2, 3)),
        C=rng.normal(size=(2, 3, 6)),
        D=rng.normal(size=2),
        z=rng.normal(size=(2, 2, 6)),
        delta_bias=rng.normal(size=2) / 10,
        delta_softplus=True,
    )
    covariances = np.array([np.eye(2), 2 * np.eye(2)])
    # a nonlinear model: its functions are callables, its covariances and prior arrays
    nonlinear_model = nonlinear.NonlinearSSMParameters(
        transition_functions=lambda z: np.array([z[0] + 0.1 * z[1], z[1] - 0.1 * np.sin(z[0])]),
        observation_functions=lambda z: np.array([np.sin(z[0]), z[0] * z[1]]),
        transition_covariance=np.eye(2) * 0.1,
        observation_covariance=np.eye(2) * 0.5,
        initial_state_mean=np.array([0.5, 0.1]),
        initial_state_covariance=np.eye(2),
    )
    general_model = nonlinear_model._replace(
        transition_functions=lambda z, w: np.array([z[0] + 0.1 * z[1] + w[0], z[1] + w[1]]),
        observation_functions=lambda z, v: np.array([np.sin(z[0]) + v[0], z[1] + v[1]]),
    )
    nonlinear_rows = dict(parameters=nonlinear_model, X=X, additive=True, alpha=1.0, beta=0.0)
    nonlinear_step = dict(
        parameters=nonlinear_model,
        x=X[1],
        filtered_state_mean=np.array([0.2, 0.0]),
        filtered_state_covariance=np.eye(2) * 0.3,
        time_index=1,
    )
    sigma = nonlinear.unscented_sigma_points(np.zeros(3), np.eye(3))
    return {
        nonlinear.unscented_sigma_points: [
            dict(mean=np.array([0.1, 0.2]), covariance=np.eye(2), alpha=0.5, beta=2.0, kappa=0.0)
        ],
        nonlinear.unscented_transform: [
            dict(
                sigma_points=sigma,
                function=lambda z, w: z[:2] + w,
                noise_points=np.ones((7, 2)),
                noise_covariance=np.eye(2),
                vectorized=False,
            )
        ],
        nonlinear.unscented_filter: [nonlinear_rows, dict(parameters=general_model, X=X)],
        nonlinear.unscented_smoother: [
            dict(nonlinear_rows, kappa=1.0, vectorized=True),
            dict(parameters=general_model, X=X),
        ],
        nonlinear.unscented_filter_step: [dict(nonlinear_step, additive=True)],
        nonlinear.extended_kalman_filter: [
            dict(parameters=nonlinear_model, X=X, jacobian_method="central", vectorized=False)
        ],
        nonlinear.extended_kalman_smoother: [dict(parameters=nonlinear_model, X=X)],
        nonlinear.extended_kalman_filter_step: [
            dict(nonlinear_step, jacobian_method="complex-step", vectorized="auto")
        ],
        inference.causal_attention: [dict(q=q, k=k, v=v, out=np.empty_like(q))],
        inference.causal_attention_backward: [
            dict(
                dout=np.ones_like(q),
                q=q,
                k=k,
                v=v,
                out=attention_out,
                lse=lse,
                dq=np.empty_like(q),
                dk=np.empty_like(q),
                dv=np.empty_like(q),
            )
        ],
        gaussian.log_gaussian_density: [
            dict(X=X, means=rng.normal(size=(2, 2)), covars=covariances, covariance_type="full")
        ],
        gaussian.weighted_moments: [
            dict(X=X, weights=rng.uniform(size=(5, 2)), centre=np.array([0.1, -0.1])),
            dict(
                X=X,
                weights=rng.uniform(size=(5, 2)),
                full=True,
                means=rng.normal(size=(2, 2)),
                covars=covariances,
                covariance_type="full",
            ),
        ],
        gaussian.compact_covars_shape: [dict(covariance_type="diag", n_components=2, n_features=2)],
        gaussian.fill_covars: [
            dict(covars=np.ones((2, 2)), covariance_type="diag", n_components=2, n_features=2)
        ],
        gaussian.compact_covars: [dict(covars=covariances, covariance_type="diag")],
        gaussian.check_covars: [
            dict(covars=covariances, covariance_type="full", n_components=2, n_features=2)
        ],
        inference.hmm_forward_backward: [dict(**hmm, lengths=np.array([2, 1]))],
        inference.hmm_forward: [dict(**hmm, lengths=np.array([2, 1]))],
        inference.hmm_viterbi: [dict(**hmm, lengths=np.array([2, 1]))],
        inference.hmm_forward_smoothing: [dict(**hmm, features=np.ones((3, 1)), carried=carried)],
        inference.hmm_varying_forward_backward: [varying],
        inference.hmm_varying_forward: [varying],
        inference.hmm_varying_viterbi: [varying],
        inference.input_driven_log_transmats: [driven],
        inference.hsmm_forward_backward: [dict(**hsmm, lengths=np.array([2, 1]))],
        inference.hsmm_forward: [
            dict(**hsmm, lengths=np.array([2, 1])),
            dict(**hsmm, log_message=np.log([[0.1, 0.2], [0.3, 0.4]])),
        ],
        inference.hsmm_filter: [
            dict(**hsmm, lengths=np.array([2, 1])),
            dict(**hsmm, log_message=np.log([[0.1, 0.2], [0.3, 0.4]])),
        ],
        inference.hsmm_viterbi: [dict(**hsmm, lengths=np.array([2, 1]))],
        inference.sample_hsmm_segments: [
            dict(
                startprob=np.array([0.4, 0.6]),
                transmat=np.array([[0.0, 1.0], [1.0, 0.0]]),
                durationprob=np.array([[0.5, 0.5], [0.2, 0.8]]),
                n_samples=4,
                random_state=0,
            )
        ],
        inference.sample_hmm_states: [
            dict(
                startprob=np.array([0.4, 0.6]),
                transmat=np.array([[0.7, 0.3], [0.2, 0.8]]),
                n_samples=4,
                random_state=0,
            )
        ],
        # diffuse: the exact diffuse initial state's P_inf, an array argument too
        kalman.kalman_filter: [lgssm_rows, dict(**lgssm_rows, diffuse=np.array([[1.5]]))],
        subspace.subspace_identification: [
            dict(X=ar_data, n_state=1, lengths=np.array([120, 80]), n_lags=3)
        ],
        kalman.kalman_smoother: [lgssm_rows, dict(**lgssm_rows, diffuse=np.array([[1.5]]))],
        kalman.kalman_filter_step: [
            dict(
                x=X[0],
                parameters=lgssm_parameters,
                filtered_state_mean=np.array([0.2]),
                filtered_state_covariance=np.array([[0.5]]),
                control=controls[0],
            )
        ],
        kalman.kalman_forecast: [
            dict(
                X=X,
                n_steps=2,
                parameters=lgssm_parameters,
                controls=controls,
                future_controls=np.ones((2, 1)),
                lengths=np.array([5]),
            )
        ],
        kalman.sample_lgssm: [
            dict(n_samples=5, parameters=lgssm_parameters, controls=controls, random_state=0)
        ],
        kalman.kalman_forward_smoothing: [
            dict(X=X, parameters=lgssm_parameters, controls=controls, carried=stream),
            # start: where the chunk begins in its sequence (a constant model ignores it).
            dict(X=X, parameters=lgssm_parameters, controls=controls, carried=stream, start=5),
        ],
        kalman_mle.lgssm_log_likelihood_gradient: [
            lgssm_rows,
            dict(**lgssm_rows, diffuse=np.array([[1.5]])),
        ],
        kalman_mle.lgssm_score_obs: [lgssm_rows],
        kalman_mle.lgssm_maximum_likelihood: [
            dict(**mle_rows, start=parameterization.unconstrained(), max_iter=2, tol=1e-6),
            # burn: the first rows of each sequence left out (statsmodels' loglikelihood_burn)
            dict(**mle_rows, max_iter=2, burn=1),
            dict(**mle_rows, max_iter=2, diffuse=np.array([[1.5]])),
            # hold: coordinates pinned at their starting values
            dict(**mle_rows, max_iter=2, hold=np.arange(parameterization.n_free) == 0),
        ],
        kalman_mle.lgssm_parameter_covariance: [
            dict(**mle_rows, unconstrained=parameterization.unconstrained(), cov_type="oim"),
            dict(**mle_rows, unconstrained=parameterization.unconstrained(), burn=1),
            # at_bound: coordinates on the boundary, held there
            dict(
                **mle_rows,
                unconstrained=parameterization.unconstrained(),
                at_bound=np.arange(parameterization.n_free) == 0,
            ),
            dict(
                **mle_rows,
                unconstrained=parameterization.unconstrained(),
                cov_type="oim",
                diffuse=np.array([[1.5]]),
            ),
        ],
        inference.elman_rnn: [rnn],
        inference.elman_rnn_backward: [
            dict(
                d_hidden=np.ones_like(hidden),
                **rnn,
                d_last_hidden=np.ones((2, 4)),
                hidden=hidden,
            )
        ],
        inference.s4d_kernel: [dict(**s4d_parameters, length=6)],
        inference.s4d_kernel_backward: [dict(dK=np.ones_like(K), **s4d_parameters)],
        inference.causal_convolution: [dict(u=u, K=K)],
        inference.causal_convolution_backward: [
            dict(dy=np.ones_like(u), u=u, K=K),
            dict(dy=np.ones_like(u), spectra=spectra),
        ],
        inference.selective_scan: [scan],
        inference.selective_scan_backward: [dict(dout=np.ones_like(u), **scan)],
        # the model enters as callables; lengths is the one array
        inference.bootstrap_particle_filter: [
            dict(
                initial=lambda noise: noise,
                transition=lambda particles, noise: particles + noise,
                log_likelihood=lambda t, particles: -0.5 * particles[..., 0] ** 2,
                lengths=np.array([3, 2]),
                random_states=[np.random.RandomState(0), np.random.RandomState(1)],
                n_particles=4,
                n_state=1,
                dtype=np.float64,
                n_steps=3,
            )
        ],
        inference.importance_sample: [
            dict(
                propose=lambda noise: (-0.5 * noise[:, 0] ** 2, noise),
                random_state=np.random.RandomState(0),
                n_samples=3,
                noise_shape=[1],
                block_size=2,
                dtype=np.float64,
                want_mean=True,
            )
        ],
    }


# The arguments of the public inference functions that take no array.
NOT_ARRAYS = {
    "scale",
    "return_lse",
    "check_finite",
    "n_jobs",
    "_block_rows",
    "_block_cols",
    "covariance_type",
    "n_components",
    "n_features",
    "name",
    "full",
    "n_samples",
    "n_steps",
    "random_state",
    "length",
    "return_spectra",
    "delta_softplus",
    "return_last_state",
    "_chunk_size",
    "n_state",
    "n_lags",
    "n_rows",
    "parameterization",
    "max_iter",
    "tol",
    "cov_type",
    "function",
    "additive",
    "alpha",
    "beta",
    "kappa",
    "vectorized",
    "jacobian_method",
    "time_index",
}

# Where NaN marks a missing value, a masked entry is one.
MISSING_SUPPORTED = {
    (gaussian.log_gaussian_density, "X"),
    (gaussian.weighted_moments, "X"),
    (kalman.kalman_filter, "X"),
    (kalman.kalman_smoother, "X"),
    (kalman.kalman_filter_step, "x"),
    (kalman.kalman_forecast, "X"),
    (kalman.kalman_forward_smoothing, "X"),
    (kalman_mle.lgssm_log_likelihood_gradient, "X"),
    (kalman_mle.lgssm_score_obs, "X"),
    (kalman_mle.lgssm_maximum_likelihood, "X"),
    (kalman_mle.lgssm_parameter_covariance, "X"),
    (subspace.subspace_identification, "X"),
    (nonlinear.unscented_filter, "X"),
    (nonlinear.unscented_smoother, "X"),
    (nonlinear.unscented_filter_step, "x"),
    (nonlinear.extended_kalman_filter, "X"),
    (nonlinear.extended_kalman_smoother, "X"),
    (nonlinear.extended_kalman_filter_step, "x"),
}


def _public_inference_functions():
    modules = [inference, gaussian, kalman] + [
        importlib.import_module(f"skseq.inference.{info.name}")
        for info in pkgutil.iter_modules(inference.__path__)
        if not info.name.startswith("_")
    ]
    return {
        getattr(module, name)
        for module in modules
        for name in module.__all__
        if inspect.isfunction(getattr(module, name))
    }


def _array_arguments(kwargs):
    """(name, path) of every array in ``kwargs``; a path goes into a tuple's fields."""
    for name, value in kwargs.items():
        if isinstance(value, np.ndarray):
            yield name, None
        elif isinstance(value, tuple):
            for field in value._fields:
                if isinstance(getattr(value, field), np.ndarray):
                    yield f"{name}.{field}", field


def _with(kwargs, name, field, wrap):
    kwargs = dict(kwargs)
    if field is None:
        kwargs[name] = wrap(kwargs[name])
    else:
        base = name.split(".")[0]
        kwargs[base] = kwargs[base]._replace(**{field: wrap(getattr(kwargs[base], field))})
    return kwargs


def _arrays(result):
    """The arrays and numbers of a result, a named tuple of them or a dict."""
    if isinstance(result, dict):
        return [part for key in sorted(result) for part in _arrays(result[key])]
    if isinstance(result, tuple):
        return [part for item in result for part in _arrays(item)]
    return [result]


def _assert_same_result(first, second):
    first, second = _arrays(first), _arrays(second)
    assert len(first) == len(second)
    for one, other in zip(first, second):
        np.testing.assert_array_equal(one, other)


INFERENCE_EXAMPLES = _inference_examples()
INFERENCE_CASES = [
    pytest.param(function, index, name, field, id=f"{function.__name__}-{index}-{name}")
    for function, examples in INFERENCE_EXAMPLES.items()
    for index, kwargs in enumerate(examples)
    for name, field in _array_arguments(kwargs)
]


def test_every_public_inference_function_has_an_example_with_every_array_argument():
    examples = INFERENCE_EXAMPLES
    assert set(examples) == _public_inference_functions()
    for function, calls in examples.items():
        given = set().union(*calls)
        missing = set(inspect.signature(function).parameters) - given - NOT_ARRAYS
        assert not missing, f"{function.__name__}: no example gives {sorted(missing)}"
        for kwargs in calls:
            function(**kwargs)
    assert len(INFERENCE_CASES) > 90


@pytest.mark.parametrize("function, index, name, field", INFERENCE_CASES)
def test_a_masked_array_is_never_read_as_data_by_an_inference_function(
    function, index, name, field
):
    def example():
        return copy.deepcopy(INFERENCE_EXAMPLES[function][index])

    def masked(array, entries=1):
        mask = np.zeros(array.shape, dtype=bool)
        mask.flat[:entries] = True
        return np.ma.masked_array(array, mask=mask)

    # A masked array without masked entries is its data.
    expected = function(**example())
    nothing_masked = _with(example(), name, field, lambda array: masked(array, 0))
    _assert_same_result(function(**nothing_masked), expected)

    kwargs = _with(example(), name, field, masked)
    argument = kwargs[name.split(".")[0]]
    before = argument if field is None else getattr(argument, field)
    before = before.data.copy(), before.mask.copy()
    if (function, name) in MISSING_SUPPORTED:
        as_nan = _with(
            example(), name, field, lambda array: np.where(masked(array).mask, np.nan, array)
        )
        _assert_same_result(function(**kwargs), function(**as_nan))
    else:
        with pytest.raises(
            ValueError,
            match=rf"^{function.__name__} does not support missing values, but {name} is a "
            r"masked array with 1 masked entry; fill in or drop the masked entries",
        ):
            function(**kwargs)
    after = argument if field is None else getattr(argument, field)
    np.testing.assert_array_equal(after.data, before[0])
    np.testing.assert_array_equal(after.mask, before[1])


def test_a_masked_frame_log_probability_says_what_a_missing_observation_is():
    kwargs = copy.deepcopy(INFERENCE_EXAMPLES[inference.hmm_forward_backward][0])
    frame = kwargs["log_frameprob"]
    kwargs["log_frameprob"] = np.ma.masked_array(frame, mask=[[0, 1], [0, 1], [0, 0]])
    with pytest.raises(ValueError, match="2 masked entries.*0 in every state"):
        inference.hmm_forward_backward(**kwargs)


def test_surplus_positional_arguments_are_not_dropped_on_the_masked_path():
    x = np.ma.masked_array(np.ones((1, 2, 1)))
    with pytest.raises(TypeError, match="positional argument"):
        inference.elman_rnn(x, [[1.0]], [[0.5]], [0.0], None, "surplus")
