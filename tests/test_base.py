"""skseq.base: sufficient statistics, the convergence monitor and the EM engine,
tested on a model small enough to solve by hand."""

import io
import pickle
from contextlib import redirect_stderr

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skseq.base import BaseEM, ConvergenceMonitor, FitContext, SufficientStatistics


class GaussianMean(BaseEM):
    """x_t ~ N(mean_, 1): no latent state, so EM reaches the sample mean in one M step."""

    def __init__(self, n_iter=10, tol=1e-6, verbose=False, n_init=1, n_jobs=None,
                 random_state=None, learning_method="batch", learning_decay=0.7,
                 learning_offset=0.0, total_samples=None, batch_size=2):  # fmt: skip
        self.n_iter = n_iter
        self.tol = tol
        self.verbose = verbose
        self.n_init = n_init
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.learning_method = learning_method
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.total_samples = total_samples
        self.batch_size = batch_size

    def _initialize(self, X, offsets, random_state):
        self.mean_ = random_state.normal()

    def _estep(self, X, offsets, buffers=None):
        log_likelihood = -0.5 * np.sum((X - self.mean_) ** 2) - 0.5 * X.size * np.log(2 * np.pi)
        return SufficientStatistics(
            n=np.array(float(X.size)), sum=np.array(X.sum())
        ), log_likelihood

    def _mstep(self, statistics):
        self.mean_ = float(statistics["sum"] / statistics["n"])

    def _n_parameters(self):
        return 1

    def _get_parameters(self):
        return self.mean_

    def _set_parameters(self, parameters):
        self.mean_ = parameters

    # The stream engine's hooks: rows are independent, so nothing is carried.

    def _is_new_stream(self):
        return not hasattr(self, "mean_")

    def _validate_stream_batch(self, X, y, lengths, sequence_ids, *, first_call, continues):
        X = np.asarray(X, dtype=np.float64)
        return X, np.array([0, X.shape[0]])

    def _advance_stream(self, X, carried):
        statistics, log_likelihood = self._estep(X, None)
        return statistics, log_likelihood, None

    def _publish_stream(self, carried):
        pass  # no filtered state to publish


def test_statistics_add_scale_and_copy():
    a = SufficientStatistics(n=np.array(2.0), sum=np.array([1.0, 2.0]))
    b = SufficientStatistics(n=np.array(1.0), sum=np.array([3.0, 0.5]))
    total = a + b
    np.testing.assert_array_equal(total["sum"], [4.0, 2.5])
    np.testing.assert_array_equal((0.5 * a)["sum"], (a * 0.5)["sum"])
    copied = a.copy()
    copied["sum"][0] = 99.0
    assert a["sum"][0] == 1.0
    with pytest.raises(ValueError, match="cannot add statistics with keys"):
        a + SufficientStatistics(n=np.array(1.0))


def test_monitor_converges_on_the_gain_or_the_limit():
    monitor = ConvergenceMonitor(tol=0.5, n_iter=4, verbose=False)
    assert not monitor.converged
    monitor.report(-10.0)
    assert not monitor.converged  # one value has no gain
    monitor.report(-9.0)
    assert not monitor.converged
    monitor.report(-8.9)
    assert monitor.converged and monitor.iter == 3
    monitor._reset()
    assert monitor.history == [] and monitor.iter == 0
    for value in (-10.0, -5.0, -1.0, 3.0):
        monitor.report(value)
    assert monitor.converged  # the limit
    decreasing = ConvergenceMonitor(tol=0.5, n_iter=10, verbose=False)
    decreasing.report(-1.0)
    decreasing.report(-2.0)
    assert decreasing.converged  # a loss is below tol too (hmmlearn's rule)


def test_monitor_verbose_prints_each_iteration():
    monitor = ConvergenceMonitor(tol=0.1, n_iter=5, verbose=True)
    with redirect_stderr(io.StringIO()) as stream:
        monitor.report(-3.0)
        monitor.report(-2.5)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "gain +0.5" in lines[1]
    # The first iteration has no gain to show (it once printed "gain +nan").
    assert lines[0].startswith("EM iteration    1: log-likelihood -3.000000, ")
    assert "gain" not in lines[0] and "nan" not in lines[0]
    assert "ConvergenceMonitor(tol=0.1, n_iter=5, iter=2" in repr(monitor)


def test_verbose_fit_prints_no_nan_gain():
    """A verbose fit's first line, after each restart too, shows no gain of nan."""
    from skseq import GaussianHMM

    X = np.random.default_rng(0).normal(size=(60, 1))
    model = GaussianHMM(2, n_iter=3, n_init=2, verbose=True, random_state=0)
    with redirect_stderr(io.StringIO()) as stream, pytest.warns(ConvergenceWarning):
        model.fit(X)
    lines = [line for line in stream.getvalue().splitlines() if line.startswith("EM iteration")]
    assert lines and not any("nan" in line for line in lines)
    firsts = [line for line in lines if line.startswith("EM iteration    1:")]
    assert len(firsts) >= 1 and not any("gain" in line for line in firsts)


def test_batch_em_reaches_the_sample_mean_and_reports_convergence():
    X = np.arange(10.0).reshape(-1, 1)
    offsets = np.array([0, 4, 10])
    model = GaussianMean(random_state=0)
    model._fit_em(X, offsets)
    assert model.mean_ == pytest.approx(4.5)
    assert model.converged_ and model.n_iter_ == 3  # two steps, then no gain
    assert len(model.monitor_.history) == 3
    assert model.lower_bound_ == model.monitor_.history[-1]


def test_em_without_enough_iterations_warns():
    X = np.arange(6.0).reshape(-1, 1)
    with pytest.warns(ConvergenceWarning, match="did not converge in n_iter=2"):
        GaussianMean(n_iter=2, tol=-np.inf, random_state=0)._fit_em(X, np.array([0, 6]))


def test_threaded_e_step_equals_the_serial_one():
    X = np.random.default_rng(0).normal(size=(101, 1))
    offsets = np.array([0, 10, 40, 41, 90, 101])
    serial = GaussianMean(random_state=0)
    serial._initialize(X, offsets, np.random.RandomState(0))
    threaded = GaussianMean(n_jobs=2)
    threaded.mean_ = serial.mean_
    statistics, log_likelihood = serial._estep(X, offsets)
    with threaded._fit_context(X) as context:
        assert context.runner is not None
        statistics_2, log_likelihood_2 = threaded._estep_parallel(X, offsets, context)
        # The fit's threads and work arrays are in the context, not on the estimator.
        assert not any(isinstance(value, FitContext) for value in vars(threaded).values())
        pickle.loads(pickle.dumps(threaded))
    assert context.buffers(X, 0, 40) is context.buffers(X, 0, 40)  # kept per block
    assert context.buffers(X.copy(), 0, 40) is None  # other data: no work arrays
    assert log_likelihood_2 == pytest.approx(log_likelihood, rel=1e-12)
    for name in statistics:
        np.testing.assert_allclose(statistics_2[name], statistics[name], rtol=1e-12)


def test_stochastic_steps_follow_the_robbins_monro_schedule():
    """s_t = (1 - rho_t) s_{t-1} + rho_t s_batch per row, rho_t = (tau + t)^-kappa;
    the M step sees it scaled to total_samples rows."""
    model = GaussianMean(learning_decay=0.7, learning_offset=2.0, total_samples=50.0)
    model.mean_ = 0.0
    batches = [np.array([1.0, 3.0]), np.array([10.0]), np.array([2.0, 2.0, 5.0])]
    running = None
    for t, batch in enumerate(batches, start=1):
        model._partial_fit_step(model._estep(batch, None)[0], 0.0, batch.size)
        rho = (2.0 + t) ** -0.7
        per_row = np.array([1.0, batch.mean()])  # (n, sum) per row of the batch
        running = per_row if running is None else (1 - rho) * running + rho * per_row
        assert model.n_batch_iter_ == t
        assert model.mean_ == pytest.approx(running[1] / running[0], rel=1e-12)
    assert model._n_rows_seen == 6


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(learning_method="sgd"), "learning_method must be"),
        (dict(learning_decay=0.5), "learning_decay must be > 0.5"),
        (dict(learning_decay=1.5), "learning_decay must be <= 1.0"),
        (dict(learning_offset=-1.0), "learning_offset must be >= 0.0"),
        (dict(total_samples=0), "total_samples must be > 0"),
        (dict(batch_size=0), "batch_size must be >= 1"),
    ],
)
def test_stochastic_hyper_parameters_are_checked(change, message):
    with pytest.raises(ValueError, match=message):
        GaussianMean(**change)._check_params()  # the shared rules of BaseEM


def test_a_non_finite_log_likelihood_is_an_error():
    model = GaussianMean()
    with pytest.raises(ValueError, match="GaussianMean: .* -inf .* probability zero"):
        model._check_log_likelihood(-np.inf)
    model._check_log_likelihood(-1e300)
