"""The structural blocks of the exact-MLE layer (shared variances, the damped cycle
rotation, stationary AR coefficients, blocks on sub-matrices), the stationary initial
covariance and the log-likelihood burn: round trips, analytic Jacobians against finite
differences, and the pulled-back gradient against finite differences of the
log-likelihood."""

import numpy as np
import pytest
from gradient_checks import numerical_gradient
from numpy.testing import assert_allclose

from skseq.inference.kalman import LGSSMParameters, kalman_filter
from skseq.inference.kalman_mle import (
    CycleRotation,
    LGSSMParameterization,
    SharedLogVariances,
    StationaryAR,
    Submatrices,
    _burned_gradient,
    lgssm_maximum_likelihood,
    lgssm_parameter_covariance,
)


def check_block(block, template, u):
    bound = block.bind(template, "transition_matrix")
    assert bound.n_free == u.size
    assert_allclose(bound.unconstrained(bound.value(u)), u, atol=1e-10)
    for i in range(template.size):

        def entry(i=i):
            return bound.value(u).ravel()[i]

        assert_allclose(bound.jacobian(u)[i], numerical_gradient(entry, u), atol=1e-8)
    for i in range(bound.n_free):

        def reported(i=i):
            return bound.reported_values(u)[i]

        assert_allclose(bound.reported_jacobian(u)[i], numerical_gradient(reported, u), atol=1e-8)
    assert len(bound.labels()) == bound.n_free
    return bound


@pytest.mark.parametrize("damped", [True, False])
def test_cycle_rotation_is_a_damped_rotation_within_its_bounds(damped):
    rng = np.random.default_rng(0)
    u = rng.normal(size=2 if damped else 1)
    bound = check_block(CycleRotation((0.1, 2.0), damped=damped), np.eye(2), u)
    frequency, *damping = bound.reported_values(u)
    assert 0.1 < frequency < 2.0
    value = bound.value(u)
    rho = damping[0] if damped else 1.0
    assert 0 < rho <= 1
    assert_allclose(value.T @ value, rho**2 * np.eye(2), atol=1e-12)  # a scaled rotation
    assert_allclose(np.abs(np.linalg.eigvals(value)), [rho, rho])
    assert_allclose(np.angle(np.linalg.eigvals(value)).max(), frequency)
    with pytest.raises(ValueError, match="frequency_bounds"):
        CycleRotation((1.0, 4.0)).bind(np.eye(2), "transition_matrix")


@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_stationary_ar_maps_every_vector_to_a_stationary_polynomial(p):
    rng = np.random.default_rng(p)
    for scale in (0.5, 3.0):
        u = scale * rng.normal(size=p)
        bound = check_block(StationaryAR(), np.zeros((1, p)), u)
        phi = bound.value(u)[0]
        # the roots of 1 - phi_1 z - ... - phi_p z^p lie outside the unit circle
        roots = np.roots(np.r_[-phi[::-1], 1.0])
        assert np.all(np.abs(roots) > 1.0)
    # the inverse: a stationary AR(2) round trips, a unit root is refused
    if p == 2:
        phi = np.array([[0.5, 0.3]])
        assert_allclose(bound.value(bound.unconstrained(phi)), phi)
        with pytest.raises(ValueError, match="not stationary"):
            bound.unconstrained(np.array([[0.5, 0.5]]))


def test_shared_log_variances_tie_coordinates_and_hold_the_others():
    rng = np.random.default_rng(1)
    template = np.diag([1.0, 2.0, 3.0, 1e-12, 5.0])
    with pytest.raises(ValueError, match="groups"):
        SharedLogVariances([2, 0, 0, -1, 2]).bind(template, "transition_covariance")
    u = rng.normal(size=2)
    block = SharedLogVariances([0, 1, 1, -1, 0], names=["a", "b"])
    bound = check_block(block, template, u)
    diagonal = np.diag(bound.value(u))
    assert_allclose(diagonal, np.exp([u[0], u[1], u[1], np.log(1e-12), u[0]]))
    assert bound.labels() == ["a", "b"]


def test_submatrices_place_their_parts_and_refuse_overlaps():
    rng = np.random.default_rng(2)
    template = np.zeros((5, 5))
    template[3, 2] = template[4, 3] = 1.0
    parts = [([0, 1], [0, 1], CycleRotation()), ([2], [2, 3, 4], StationaryAR())]
    u = rng.normal(size=5)
    bound = check_block(Submatrices(parts), template, u)
    value = bound.value(u)
    assert_allclose(value[3:, 2:4], np.eye(2))  # held entries
    assert_allclose(value[:2, 2:], 0.0)
    with pytest.raises(ValueError, match="overlap"):
        Submatrices([([0], [0], StationaryAR()), ([0], [0, 1], StationaryAR())]).bind(
            template, "transition_matrix"
        )


def structural_model(rng):
    """A level + damped cycle + AR(2) model, the AR part stationary-initialised."""
    transition = np.zeros((5, 5))
    transition[0, 0] = 1.0
    transition[4, 3] = 1.0
    transition[1:3, 1:3] = np.eye(2)
    transition[3, 3:5] = [0.4, 0.2]
    parameters = LGSSMParameters(
        transition_matrix=transition,
        observation_matrix=[[1.0, 1.0, 0.0, 1.0, 0.0]],
        transition_covariance=np.diag([0.5, 0.3, 0.3, 0.7, 1e-10]),
        observation_covariance=[[0.8]],
        initial_state_covariance=np.diag([100.0, 100.0, 100.0, 1.0, 1.0]),
    )
    blocks = {
        "transition_matrix": Submatrices(
            [([1, 2], [1, 2], CycleRotation((0.1, 3.0))), ([3], [3, 4], StationaryAR())]
        ),
        "transition_covariance": SharedLogVariances([0, 1, 1, 2, -1]),
        "observation_covariance": SharedLogVariances([0]),
    }
    stationary = np.array([False, False, False, True, True])
    parameterization = LGSSMParameterization(parameters, blocks, stationary=stationary)
    u = parameterization.unconstrained() + 0.2 * rng.normal(size=parameterization.n_free)
    return parameterization, u


def test_the_stationary_initial_covariance_follows_the_dynamics_and_its_jacobian():
    rng = np.random.default_rng(3)
    parameterization, u = structural_model(rng)
    parameters = parameterization.constrained(u)
    s = slice(3, 5)
    F, Q, P = (
        parameters.transition_matrix[s, s],
        parameters.transition_covariance[s, s],
        parameters.initial_state_covariance[s, s],
    )
    assert_allclose(P, F @ P @ F.T + Q, atol=1e-12)
    assert_allclose(parameters.initial_state_covariance[:3, :3], np.diag([100.0] * 3))
    jacobian = parameterization.jacobian(u)
    for i in range(jacobian.shape[0]):

        def entry(i=i):
            return parameterization.flatten(parameterization.constrained(u))[i]

        assert_allclose(jacobian[i], numerical_gradient(entry, u), atol=1e-7)
    with pytest.raises(ValueError, match="driven"):
        LGSSMParameterization(
            parameterization.parameters, {}, stationary=[False, False, False, False, True]
        )


@pytest.mark.parametrize("burn", [0, 2])
def test_the_burned_gradient_is_the_derivative_of_the_burned_log_likelihood(burn):
    rng = np.random.default_rng(4)
    parameterization, u = structural_model(rng)
    X = np.cumsum(rng.normal(size=(30, 1)), axis=0)
    X[7] = np.nan
    controls = np.zeros((30, 0))
    offsets = np.array([0, 18, 30])

    def burned():
        result = kalman_filter(parameterization.constrained(u), X, lengths=[18, 12])
        keep = np.ones(30, dtype=bool)
        keep[[*range(burn), *range(18, 18 + burn)]] = False
        return result.log_predictive[keep].sum()

    log_likelihood, gradient = _burned_gradient(parameterization, u, X, controls, offsets, burn)
    assert_allclose(log_likelihood, burned(), rtol=1e-12)
    assert_allclose(gradient, numerical_gradient(burned, u), rtol=1e-5, atol=1e-6)


def test_burn_in_the_optimiser_and_the_standard_errors():
    rng = np.random.default_rng(5)
    parameterization, _ = structural_model(rng)
    X = np.cumsum(rng.normal(size=(120, 1)), axis=0)
    fit = lgssm_maximum_likelihood(parameterization, X, burn=3, max_iter=30)
    result = kalman_filter(fit.parameters, X)
    assert_allclose(fit.log_likelihood, result.log_predictive[3:].sum(), rtol=1e-10)
    covariance = lgssm_parameter_covariance(parameterization, fit.unconstrained, X, burn=3)
    assert covariance.covariance.shape == (parameterization.n_free,) * 2
    with pytest.raises(ValueError, match="burn"):
        lgssm_maximum_likelihood(parameterization, X, burn=-1)
