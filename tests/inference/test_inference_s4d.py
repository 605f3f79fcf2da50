"""The S4D kernel, the causal FFT convolution and their backward passes.

References: the kernel by its definition (direct powers ``exp(k Δ A)`` in
float64), the impulse response of the discretised recurrence, the zero-order
hold as the matrix exponential of the augmented continuous-time system, the
convolution as a direct sum over lags, central finite differences in float64
for every gradient (real and imaginary parts of complex parameters perturbed
separately), and PyTorch autograd through the same computation when torch is
installed.
"""

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from skseq.inference import (
    ConvolutionGradients,
    ConvolutionResult,
    ConvolutionSpectra,
    S4DKernelGradients,
    causal_convolution,
    causal_convolution_backward,
    s4d_kernel,
    s4d_kernel_backward,
)
from skseq.inference import s4d as s4d_module

# -- references ---------------------------------------------------------------------


def reference_kernel(log_dt, A, B, C, length):
    """K[c, k] = 2 Re sum_n C B̄ Ā^k, with Ā^k = exp(k Δ A) evaluated directly (float64)."""
    log_dt = np.asarray(log_dt, np.float64)
    A, B, C = (np.asarray(value, np.complex128) for value in (A, B, C))
    dt = np.exp(log_dt)[:, None]
    x = dt * A
    with np.errstate(invalid="ignore", divide="ignore"):
        b_bar = np.where(A == 0, dt * B, (np.exp(x) - 1) / np.where(A == 0, 1, A) * B)
    powers = np.exp(x[..., None] * np.arange(length))
    return 2 * np.real(np.einsum("cn,cnk->ck", C * b_bar, powers))


def recurrence_kernel(log_dt, A, B, C, length):
    """Impulse response of h_k = Ā h_{k-1} + B̄ δ_k, y_k = 2 Re C·h_k (short lengths only)."""
    dt = np.exp(np.asarray(log_dt, np.float64))[:, None]
    a_bar = np.exp(dt * A)
    state = (a_bar - 1) / A * B
    kernel = np.zeros((len(dt), length))
    for k in range(length):
        kernel[:, k] = 2 * np.real(np.sum(C * state, axis=1))
        state = a_bar * state
    return kernel


def direct_convolution(u, K):
    """y[b, c, t] = sum_{k <= t} K[c, k] u[b, c, t - k], by a sum over lags (float64)."""
    u, K = np.asarray(u, np.float64), np.asarray(K, np.float64)
    y = np.zeros_like(u)
    for k in range(min(K.shape[1], u.shape[2])):
        y[:, :, k:] += K[None, :, k, None] * u[:, :, : u.shape[2] - k]
    return y


def random_parameters(rng, channels=3, n_modes=4, scale_dt=(-3.0, 0.5)):
    """Steps around Δ in [0.05, 1.6] and modes with |Δ A| both below and above 1."""
    return {
        "log_dt": rng.uniform(*scale_dt, size=channels),
        "A": -np.exp(rng.normal(size=(channels, n_modes)))
        + 1j * rng.normal(scale=3.0, size=(channels, n_modes)),
        "B": rng.normal(size=(channels, n_modes)) + 1j * rng.normal(size=(channels, n_modes)),
        "C": rng.normal(size=(channels, n_modes)) + 1j * rng.normal(size=(channels, n_modes)),
    }


def kernel_scale(log_dt, A, B, C):
    """sum_n |C B̄|: no entry of the kernel exceeds twice this when Re A <= 0."""
    dt = np.exp(np.asarray(log_dt, np.float64))[:, None]
    return np.abs(C * (np.exp(dt * A) - 1) / A * B).sum(axis=1, keepdims=True)


def assert_close_in_scale(actual, expected, scale, tolerance):
    """|actual - expected| <= tolerance * scale elementwise (scale broadcasts, e.g. per channel)."""
    np.testing.assert_allclose((actual - expected) / scale, 0.0, rtol=0, atol=tolerance)


def numerical_gradient(function, array, eps=1e-6):
    """Central differences of the scalar ``function()``; for complex ``array`` d/dRe + i d/dIm."""
    gradient = np.zeros_like(array)
    directions = (1.0, 1j) if np.iscomplexobj(array) else (1.0,)
    for index in np.ndindex(array.shape):
        original = array[index]
        for direction in directions:
            array[index] = original + eps * direction
            plus = function()
            array[index] = original - eps * direction
            minus = function()
            array[index] = original
            gradient[index] += direction * (plus - minus) / (2 * eps)
    return gradient


# -- the kernel ------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 5, 8, 63, 64, 100, 1000])
def test_kernel_matches_its_definition(length):
    rng = np.random.default_rng(length)
    parameters = random_parameters(rng)
    K = s4d_kernel(**parameters, length=length).K
    assert K.shape == (3, length) and K.dtype == np.float64
    expected = reference_kernel(**parameters, length=length)
    assert_close_in_scale(K, expected, kernel_scale(**parameters), 1e-13)


def test_kernel_is_the_impulse_response_of_the_recurrence():
    rng = np.random.default_rng(1)
    parameters = random_parameters(rng)
    assert_close_in_scale(
        s4d_kernel(**parameters, length=40).K,
        recurrence_kernel(**parameters, length=40),
        kernel_scale(**parameters),
        1e-13,
    )


def test_zero_order_hold_is_the_exact_discretisation():
    """Ā and B̄ are the blocks of expm(Δ [[A, B], [0, 0]]) (the input held over the step)."""
    log_dt, A, B, C = np.log(0.7), -0.3 + 2.0j, 0.5 - 1.0j, 1.0 + 0.25j
    augmented = scipy.linalg.expm(np.exp(log_dt) * np.array([[A, B], [0.0, 0.0]]))
    a_bar, b_bar = augmented[0, 0], augmented[0, 1]
    expected = 2 * np.real(C * b_bar * a_bar ** np.arange(6))
    K = s4d_kernel([log_dt], [[A]], [[B]], [[C]], length=6).K
    np.testing.assert_allclose(K[0], expected, rtol=1e-13)


def test_kernel_at_and_near_zero_A_is_the_limit():
    """B̄ -> Δ B as A -> 0: no division by zero and no cancellation for tiny Δ A."""
    log_dt = np.log([0.5, 0.5, 1e-3])
    A = np.array([[0.0], [1e-12 - 1e-12j], [-1e-9 + 0j]])
    B = C = np.ones((3, 1))
    K = s4d_kernel(log_dt, A, B, C, length=3).K
    np.testing.assert_allclose(K[0], [1.0, 1.0, 1.0], rtol=1e-15)
    np.testing.assert_allclose(K[1], [1.0, 1.0, 1.0], rtol=1e-11)
    # (exp(Δ A) - 1) / A for Δ A = -1e-12: naive float64 loses 4 digits here.
    expected = 2 * 1e-3 * (1 - 0.5e-12) * np.exp(-1e-12 * np.arange(3))
    np.testing.assert_allclose(K[2], expected, rtol=1e-15)
    grads = s4d_kernel_backward(np.ones_like(K), log_dt, A, B, C)
    assert all(np.all(np.isfinite(value)) for value in grads)
    # At Δ A -> 0, d sum(K) / dA = 2 (Δ² φ'(0) sum_k 1 + Δ² sum_k k) = 9 Δ² for three
    # lags (φ'(0) = 1/2): the closed form of φ' would cancel to a few digits here.
    np.testing.assert_allclose(grads.dA[:2, 0], 9 * 0.25, rtol=1e-11)
    np.testing.assert_allclose(grads.dA[2, 0], 9 * 1e-6, rtol=1e-11)


@pytest.mark.parametrize("dtype, tolerance", [(np.float64, 1e-12), (np.float32, 1e-6)])
def test_long_kernels_stay_exact(dtype, tolerance):
    """S4D-Lin phases up to ~4e4 rad at length 20000: no error growing with the lag.

    Powers by repeated multiplication would be off by about k eps, 1e-3 of the
    scale in float32 at this length.
    """
    rng = np.random.default_rng(2)
    channels, n_modes, length = 4, 32, 20000
    log_dt = np.log(np.array([1e-3, 1e-2, 5e-2, 1e-1])).astype(dtype)
    A = np.tile(-0.5 + 1j * np.pi * np.arange(n_modes), (channels, 1))
    C = rng.normal(size=A.shape) + 1j * rng.normal(size=A.shape)
    B = np.ones_like(A)
    K = s4d_kernel(log_dt, A, B, C, length).K
    assert K.dtype == dtype
    expected = reference_kernel(log_dt.astype(np.float64), A, B, C, length)
    error = np.abs(K - expected) / kernel_scale(log_dt, A, B, C)
    assert error.max() < tolerance


def test_strongly_decaying_modes_flush_to_zero_not_to_garbage():
    """S4D-Real with large steps: most powers underflow float32; the kernel stays exact."""
    n_modes = 32
    A = np.tile(-(np.arange(n_modes) + 1.0), (2, 1))
    C = np.ones_like(A)
    for dtype in (np.float32, np.float64):
        log_dt = np.log([0.1, 2.0]).astype(dtype)
        K = s4d_kernel(log_dt, A, np.ones_like(A), C, length=3000).K
        expected = reference_kernel(log_dt, A, np.ones_like(A), C, 3000)
        tiny = np.finfo(dtype).tiny
        scale = kernel_scale(log_dt, A, np.ones_like(A), C)
        assert_close_in_scale(K, expected, scale, 4 * np.finfo(dtype).eps)
        assert np.all(np.isfinite(K))
        underflowed = np.abs(expected) < tiny * scale
        assert np.any(underflowed)
        assert np.all(
            np.abs(K[underflowed]) <= 64 * tiny * np.broadcast_to(scale, K.shape)[underflowed]
        )


def test_kernel_float32_is_float64_rounded():
    rng = np.random.default_rng(3)
    parameters = random_parameters(rng, channels=5, n_modes=8)
    parameters["log_dt"] = parameters["log_dt"].astype(np.float32)
    K32 = s4d_kernel(**parameters, length=300).K
    K64 = s4d_kernel(
        **dict(parameters, log_dt=parameters["log_dt"].astype(np.float64)), length=300
    ).K
    assert K32.dtype == np.float32
    assert_close_in_scale(K32, K64, kernel_scale(**parameters), 1e-6)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    channels=st.integers(1, 3),
    n_modes=st.integers(1, 5),
    short=st.integers(1, 70),
    extra=st.integers(1, 200),
)
def test_kernel_properties(seed, channels, n_modes, short, extra):
    """A shorter kernel is a prefix of a longer one (other block sizes); K is linear in C."""
    rng = np.random.default_rng(seed)
    parameters = random_parameters(rng, channels, n_modes)
    long = s4d_kernel(**parameters, length=short + extra).K
    scale = kernel_scale(**parameters)
    assert_close_in_scale(s4d_kernel(**parameters, length=short).K, long[:, :short], scale, 1e-13)
    other_C = rng.normal(size=parameters["C"].shape) + 0j
    summed = s4d_kernel(**dict(parameters, C=parameters["C"] + other_C), length=short + extra).K
    assert_close_in_scale(
        summed,
        long + s4d_kernel(**dict(parameters, C=other_C), length=short + extra).K,
        scale + kernel_scale(**dict(parameters, C=other_C)),
        1e-12,
    )


# -- the kernel's gradients ------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 9, 70])
@pytest.mark.parametrize("regime", ["mixed", "small_steps", "real_modes"])
def test_kernel_gradients_match_finite_differences(length, regime):
    rng = np.random.default_rng(length)
    if regime == "small_steps":  # |Δ A| < 1: the series branch of (e^x - 1) / x
        parameters = random_parameters(rng, channels=2, n_modes=3, scale_dt=(-6.0, -4.0))
    elif regime == "real_modes":  # S4D-Real-like modes with real B and C
        parameters = random_parameters(rng, channels=2, n_modes=3)
        parameters.update(A=parameters["A"].real, B=parameters["B"].real, C=parameters["C"].real)
    else:
        parameters = random_parameters(rng, channels=2, n_modes=3)
    upstream = rng.normal(size=(2, length))
    grads = s4d_kernel_backward(upstream, **parameters)
    assert isinstance(grads, S4DKernelGradients)
    variables = {
        key: np.array(value, dtype=np.result_type(value, np.complex128))
        for key, value in parameters.items()
        if key != "log_dt"
    }
    variables["log_dt"] = np.array(parameters["log_dt"], dtype=np.float64)

    def objective():
        return float(np.sum(reference_kernel(**variables, length=length) * upstream))

    for name, gradient in zip(("log_dt", "A", "B", "C"), grads, strict=True):
        expected = numerical_gradient(objective, variables[name])
        assert gradient.shape == variables[name].shape
        np.testing.assert_allclose(gradient, expected, rtol=1e-6, atol=1e-8, err_msg=name)


def test_kernel_gradients_in_float32():
    rng = np.random.default_rng(4)
    parameters = random_parameters(rng, channels=3, n_modes=4)
    upstream = rng.normal(size=(3, 50))
    grads64 = s4d_kernel_backward(upstream, **parameters)
    grads32 = s4d_kernel_backward(
        upstream.astype(np.float32),
        **dict(parameters, log_dt=parameters["log_dt"].astype(np.float32)),
    )
    assert grads32.dlog_dt.dtype == np.float32 and grads32.dA.dtype == np.complex64
    for name, low, high in zip(S4DKernelGradients._fields, grads32, grads64, strict=True):
        np.testing.assert_allclose(
            low, high, rtol=2e-5, atol=2e-5 * np.abs(high).max(), err_msg=name
        )


def test_kernel_and_gradients_agree_with_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    parameters = random_parameters(rng, channels=3, n_modes=4)
    length = 77
    upstream = rng.normal(size=(3, length))
    tensors = {key: torch.tensor(value, requires_grad=True) for key, value in parameters.items()}
    dtA = torch.exp(tensors["log_dt"])[:, None] * tensors["A"]
    powers = torch.exp(dtA.unsqueeze(-1) * torch.arange(length, dtype=torch.float64))
    weights = tensors["C"] * tensors["B"] * (torch.exp(dtA) - 1) / tensors["A"]
    kernel = 2 * torch.einsum("cn,cnk->ck", weights, powers).real
    kernel.backward(torch.from_numpy(upstream))
    np.testing.assert_allclose(
        s4d_kernel(**parameters, length=length).K, kernel.detach().numpy(), rtol=1e-12, atol=1e-12
    )
    grads = s4d_kernel_backward(upstream, **parameters)
    for name, gradient in zip(("log_dt", "A", "B", "C"), grads, strict=True):
        np.testing.assert_allclose(
            gradient, tensors[name].grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name
        )


def test_kernel_threads_give_the_serial_result():
    rng = np.random.default_rng(6)
    parameters = random_parameters(rng, channels=7, n_modes=5)
    upstream = rng.normal(size=(7, 130))
    np.testing.assert_array_equal(
        s4d_kernel(**parameters, length=130, n_jobs=2).K, s4d_kernel(**parameters, length=130).K
    )
    for threaded, serial in zip(
        s4d_kernel_backward(upstream, **parameters, n_jobs=2),
        s4d_kernel_backward(upstream, **parameters),
        strict=True,
    ):
        np.testing.assert_array_equal(threaded, serial)


def test_kernel_inputs_are_not_modified_and_may_be_lists():
    rng = np.random.default_rng(7)
    parameters = random_parameters(rng, channels=2, n_modes=2)
    copies = {key: value.copy() for key, value in parameters.items()}
    upstream = rng.normal(size=(2, 10))
    upstream_copy = upstream.copy()
    K = s4d_kernel(**parameters, length=10).K
    s4d_kernel_backward(upstream, **parameters)
    for key, value in parameters.items():
        np.testing.assert_array_equal(value, copies[key])
    np.testing.assert_array_equal(upstream, upstream_copy)
    as_lists = {key: value.tolist() for key, value in parameters.items()}
    np.testing.assert_array_equal(s4d_kernel(**as_lists, length=10).K, K)


def test_kernel_with_no_channels():
    K = s4d_kernel(np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)), length=4).K
    assert K.shape == (0, 4)
    grads = s4d_kernel_backward(np.zeros((0, 4)), np.zeros(0), *(np.zeros((0, 3)),) * 3)
    assert grads.dA.shape == (0, 3) and grads.dlog_dt.shape == (0,)


GOOD = {"log_dt": np.zeros(2), "A": -np.ones((2, 3)), "B": np.ones((2, 3)), "C": np.ones((2, 3))}


@pytest.mark.parametrize(
    "name, value, error, match",
    [
        ("log_dt", np.zeros((2, 1)), ValueError, r"log_dt must have shape \(channels,\)"),
        ("log_dt", np.zeros(2, dtype=complex), TypeError, "log_dt must be real"),
        ("log_dt", np.array(["a", "b"]), TypeError, "log_dt must be a numeric"),
        ("log_dt", [0.0, np.nan], ValueError, "log_dt contains NaN"),
        ("A", -np.ones((3, 3)), ValueError, r"A must have shape \(channels, N / 2\)"),
        ("A", np.zeros((2, 0)), ValueError, "at least one mode"),
        ("A", np.full((2, 3), np.inf), ValueError, "A contains NaN or infinity"),
        ("A", np.full((2, 3), complex(1, np.nan)), ValueError, "A contains NaN or infinity"),
        ("B", np.ones((2, 4)), ValueError, r"B must have shape \(channels, N / 2\) = \(2, 3\)"),
        ("C", np.array([["x"] * 3] * 2), TypeError, "C must be a numeric"),
        ("C", np.full((2, 3), np.nan), ValueError, "C contains NaN"),
    ],
)
def test_kernel_bad_inputs_raise(name, value, error, match):
    with pytest.raises(error, match=match):
        s4d_kernel(**dict(GOOD, **{name: value}), length=5)
    with pytest.raises(error, match=match):
        s4d_kernel_backward(np.ones((2, 5)), **dict(GOOD, **{name: value}))


def test_kernel_bad_length_and_dK_raise():
    for length, error in [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)]:
        with pytest.raises(error, match="length"):
            s4d_kernel(**GOOD, length=length)
    for dK, match in [
        (np.ones((3, 5)), "dK must have shape"),
        (np.ones((2, 0)), "dK must"),
        (np.full((2, 5), np.inf), "dK contains NaN or infinity"),
    ]:
        with pytest.raises(ValueError, match=match):
            s4d_kernel_backward(dK, **GOOD)


def test_overflow_is_loud():
    """Growing modes and huge steps raise instead of returning inf or NaN."""
    growing = dict(GOOD, A=np.full((2, 3), 1.0 + 1j))
    K = s4d_kernel(**growing, length=50).K  # e^49: large but finite
    assert np.all(np.isfinite(K))
    with pytest.raises(ValueError, match="overflows"):
        s4d_kernel(**growing, length=2000)
    with pytest.raises(ValueError, match="overflows"):
        s4d_kernel_backward(np.ones((2, 2000)), **growing)
    with pytest.raises(ValueError, match=r"exp\(log_dt\) overflows"):
        s4d_kernel(**dict(GOOD, log_dt=[800.0, 0.0]), length=5)
    with pytest.raises(ValueError, match="overflows"):
        s4d_kernel(**dict(GOOD, log_dt=[8.0, 0.0], A=np.full((2, 3), 100.0)), length=5)


# -- the convolution ----------------------------------------------------------------------


@pytest.mark.parametrize("kernel_length", [1, 4, 16, 30])
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_convolution_matches_the_direct_sum(kernel_length, dtype, rtol):
    rng = np.random.default_rng(kernel_length)
    u = rng.normal(size=(3, 2, 16)).astype(dtype)
    K = rng.normal(size=(2, kernel_length)).astype(dtype)
    y = causal_convolution(u, K).y
    assert y.shape == u.shape and y.dtype == dtype and y.flags.c_contiguous
    expected = direct_convolution(u, K)
    scale = np.abs(u).max() * np.abs(K).sum()
    assert_close_in_scale(y, expected, scale, rtol)
    y_again, spectra = causal_convolution(u, K, return_spectra=True)
    np.testing.assert_array_equal(y_again, y)
    assert isinstance(spectra, ConvolutionSpectra)
    assert spectra.n_fft >= 16 + min(kernel_length, 16) - 1


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 3),
    channels=st.integers(1, 3),
    length=st.integers(1, 60),
    kernel_length=st.integers(1, 80),
    cut=st.integers(0, 59),
)
def test_convolution_properties(seed, batch, channels, length, kernel_length, cut):
    """Equal to the direct sum, and causal: later inputs do not change earlier outputs."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(batch, channels, length))
    K = rng.normal(size=(channels, kernel_length))
    y = causal_convolution(u, K).y
    scale = np.abs(u).max() * np.abs(K).sum()
    assert_close_in_scale(y, direct_convolution(u, K), scale, 1e-12)
    cut = min(cut, length - 1)
    changed = u.copy()
    changed[..., cut:] = rng.normal(size=changed[..., cut:].shape)
    assert_close_in_scale(causal_convolution(changed, K).y[..., :cut], y[..., :cut], scale, 1e-12)


@pytest.mark.parametrize("kernel_length", [3, 12, 20])
@pytest.mark.parametrize("with_spectra", [False, True])
def test_convolution_gradients_match_finite_differences(kernel_length, with_spectra):
    rng = np.random.default_rng(kernel_length)
    u = rng.normal(size=(2, 2, 12))
    K = rng.normal(size=(2, kernel_length))
    upstream = rng.normal(size=u.shape)
    if with_spectra:
        _, spectra = causal_convolution(u, K, return_spectra=True)
        grads = causal_convolution_backward(upstream, spectra=spectra)
    else:
        grads = causal_convolution_backward(upstream, u, K)
    assert isinstance(grads, ConvolutionGradients)

    def objective():
        return float(np.sum(direct_convolution(u, K) * upstream))

    np.testing.assert_allclose(grads.du, numerical_gradient(objective, u), rtol=1e-7, atol=1e-9)
    expected_dK = numerical_gradient(objective, K)
    np.testing.assert_allclose(grads.dK, expected_dK, rtol=1e-7, atol=1e-9)
    if kernel_length > 12:  # lags beyond the sequence do not reach the output
        np.testing.assert_array_equal(grads.dK[:, 12:], 0.0)


def test_convolution_float32_gradients_and_spectra_path():
    rng = np.random.default_rng(8)
    u = rng.normal(size=(4, 3, 50)).astype(np.float32)
    K = rng.normal(size=(3, 50)).astype(np.float32)
    dy = rng.normal(size=u.shape).astype(np.float32)
    y, spectra = causal_convolution(u, K, return_spectra=True)
    assert spectra.u_spectrum.dtype == np.complex64
    by_spectra = causal_convolution_backward(dy, spectra=spectra)
    by_inputs = causal_convolution_backward(dy, u, K)
    exact = causal_convolution_backward(dy.astype(np.float64), u.astype(np.float64), K)
    for name in ("du", "dK"):
        low = getattr(by_spectra, name)
        assert low.dtype == np.float32
        np.testing.assert_array_equal(low, getattr(by_inputs, name))
        high = getattr(exact, name)
        assert_close_in_scale(low, high, np.abs(high).max(), 2e-5)


def test_convolution_agrees_with_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    u = rng.normal(size=(2, 3, 40))
    K = rng.normal(size=(3, 40))
    dy = rng.normal(size=u.shape)
    u_t = torch.tensor(u, requires_grad=True)
    K_t = torch.tensor(K, requires_grad=True)
    n_fft = 80
    y_t = torch.fft.irfft(torch.fft.rfft(u_t, n=n_fft) * torch.fft.rfft(K_t, n=n_fft), n=n_fft)
    y_t = y_t[..., :40]
    y_t.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(causal_convolution(u, K).y, y_t.detach().numpy(), atol=1e-12)
    grads = causal_convolution_backward(dy, u, K)
    np.testing.assert_allclose(grads.du, u_t.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(grads.dK, K_t.grad.numpy(), atol=1e-12)


def test_convolution_threads_give_the_serial_result():
    rng = np.random.default_rng(10)
    u = rng.normal(size=(3, 5, 70))
    K = rng.normal(size=(5, 70))
    dy = rng.normal(size=u.shape)
    np.testing.assert_array_equal(causal_convolution(u, K, n_jobs=2).y, causal_convolution(u, K).y)
    for threaded, serial in zip(
        causal_convolution_backward(dy, u, K, n_jobs=2),
        causal_convolution_backward(dy, u, K),
        strict=True,
    ):
        np.testing.assert_array_equal(threaded, serial)


def test_convolution_empty_and_unmodified_inputs():
    assert causal_convolution(np.zeros((0, 2, 5)), np.ones((2, 3))).y.shape == (0, 2, 5)
    y, spectra = causal_convolution(np.zeros((0, 2, 5)), np.ones((2, 3)), return_spectra=True)
    grads = causal_convolution_backward(np.zeros((0, 2, 5)), spectra=spectra)
    assert grads.du.shape == (0, 2, 5) and grads.dK.shape == (2, 3)
    np.testing.assert_array_equal(grads.dK, 0.0)
    rng = np.random.default_rng(11)
    u = rng.normal(size=(2, 2, 9)).astype(np.float32)
    K = rng.normal(size=(2, 9))
    dy = rng.normal(size=u.shape)
    copies = [u.copy(), K.copy(), dy.copy()]
    causal_convolution(u, K)
    causal_convolution_backward(dy, u, K)
    for original, copy in zip((u, K, dy), copies, strict=True):
        np.testing.assert_array_equal(original, copy)


@pytest.mark.parametrize(
    "u, K, error, match",
    [
        (np.ones((2, 9)), np.ones((2, 3)), ValueError, r"u must have shape \(batch, channels"),
        (np.ones((1, 2, 9)), np.ones((3, 3)), ValueError, r"K must have shape \(channels"),
        (np.ones((1, 2, 9)), np.ones((2, 0)), ValueError, "kernel_length >= 1"),
        (np.ones((1, 2, 9), dtype=complex), np.ones((2, 3)), TypeError, "u must be real"),
        (np.ones((1, 2, 9)), np.ones((2, 3), dtype=complex), TypeError, "K must be real"),
        (np.full((1, 2, 9), np.nan), np.ones((2, 3)), ValueError, "u contains NaN"),
        (np.ones((1, 2, 9)), np.full((2, 3), -np.inf), ValueError, "K contains NaN or infinity"),
    ],
)
def test_convolution_bad_inputs_raise(u, K, error, match):
    with pytest.raises(error, match=match):
        causal_convolution(u, K)
    with pytest.raises(error, match=match):
        causal_convolution_backward(np.ones((1, 2, 9)), u, K)


def test_convolution_backward_argument_checks():
    u, K = np.ones((1, 2, 9)), np.ones((2, 3))
    _, spectra = causal_convolution(u, K, return_spectra=True)
    dy = np.ones_like(u)
    for kwargs in ({}, {"u": u}, {"K": K}, {"u": u, "K": K, "spectra": spectra}):
        with pytest.raises(ValueError, match="either both u and K, or spectra"):
            causal_convolution_backward(dy, **kwargs)
    with pytest.raises(ValueError, match="dy must have the shape of u"):
        causal_convolution_backward(np.ones((1, 2, 8)), u, K)
    with pytest.raises(ValueError, match="spectra are for u"):
        causal_convolution_backward(np.ones((2, 2, 9)), spectra=spectra)
    with pytest.raises(ValueError, match="spectra are of dtype complex128"):
        causal_convolution_backward(dy.astype(np.float32), spectra=spectra)
    with pytest.raises(TypeError, match="spectra must be the ConvolutionSpectra"):
        causal_convolution_backward(dy, spectra=(1, 2))
    with pytest.raises(ValueError, match="dy contains NaN"):
        causal_convolution_backward(np.full_like(u, np.nan), spectra=spectra)


def test_fft_length_is_fast_and_long_enough():
    for length, lags in [(1, 1), (7, 3), (1000, 1000), (4096, 4096), (4097, 100)]:
        n_fft = s4d_module._fft_length(length, lags)
        assert n_fft >= length + lags - 1
    assert s4d_module._fft_length(4096, 4096) == 8192


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_avx2_build_equals_the_portable_build(monkeypatch, dtype, rtol):
    """Both builds of the kernels (see skseq._kernels.load) give the same results."""
    import importlib

    from skseq import _kernels

    if not _kernels.cpu_has_avx2_fma():
        pytest.skip("this CPU has no AVX2/FMA")
    try:
        importlib.import_module("skseq._kernels._s4d_avx2")
    except ImportError:
        pytest.skip("the AVX2 build is not available on this platform")
    rng = np.random.default_rng(12)
    parameters = random_parameters(rng, channels=4, n_modes=6)
    parameters["log_dt"] = parameters["log_dt"].astype(dtype)
    u = rng.normal(size=(3, 4, 150)).astype(dtype)
    dy = rng.normal(size=u.shape).astype(dtype)
    results = {}
    for build in ("_s4d_avx2", "_s4d"):
        monkeypatch.setattr(s4d_module, "_s4d", importlib.import_module(f"skseq._kernels.{build}"))
        K = s4d_kernel(**parameters, length=150).K
        y, spectra = causal_convolution(u, K, return_spectra=True)
        conv_grads = causal_convolution_backward(dy, spectra=spectra)
        results[build] = (K, y, *conv_grads, *s4d_kernel_backward(conv_grads.dK, **parameters))
    for fast, portable in zip(results["_s4d_avx2"], results["_s4d"], strict=True):
        assert_close_in_scale(fast, portable, np.abs(portable).max(), rtol)


def test_option_and_missing_argument_checks():
    u, K = np.ones((1, 2, 9)), np.ones((2, 3))
    for n_jobs, error in [(0, ValueError), (1.5, TypeError), ("2", TypeError)]:
        with pytest.raises(error, match="n_jobs"):
            s4d_kernel(**GOOD, length=5, n_jobs=n_jobs)
        with pytest.raises(error, match="n_jobs"):
            s4d_kernel_backward(np.ones((2, 5)), **GOOD, n_jobs=n_jobs)
        with pytest.raises(error, match="n_jobs"):
            causal_convolution(u, K, n_jobs=n_jobs)
        with pytest.raises(error, match="n_jobs"):
            causal_convolution_backward(u, u, K, n_jobs=n_jobs)
    for flag in ("yes", 1, None):
        with pytest.raises(TypeError, match="return_spectra must be a bool"):
            causal_convolution(u, K, return_spectra=flag)
    assert causal_convolution(u, K, return_spectra=np.bool_(True)).spectra is not None
    for name in GOOD:
        with pytest.raises(TypeError, match=f"{name} is required"):
            s4d_kernel(**dict(GOOD, **{name: None}), length=5)
    with pytest.raises(TypeError, match="u is required"):
        causal_convolution(None, K)
    with pytest.raises(TypeError, match="K is required"):
        causal_convolution(u, None)
    with pytest.raises(TypeError, match="dy is required"):
        causal_convolution_backward(None, u, K)


def test_convolution_with_spectra_is_a_named_result():
    rng = np.random.default_rng(0)
    u, K = rng.normal(size=(2, 3, 16)), rng.normal(size=(3, 16))
    result = causal_convolution(u, K, return_spectra=True)
    assert isinstance(result, ConvolutionResult)
    np.testing.assert_array_equal(result.y, causal_convolution(u, K).y)
    assert result.spectra.n_fft >= 31 and result.spectra.length == 16


# -- large inputs: transforms that overflow are redone scaled, never NaN -----------


def direct_convolution_backward(dy, u, K):
    """du and dK by their sums over lags, in float64."""
    dy, u, K = (np.asarray(x, np.float64) for x in (dy, u, K))
    length = dy.shape[2]
    du = np.zeros_like(dy)
    dK = np.zeros_like(K)
    for k in range(min(K.shape[1], length)):
        du[:, :, : length - k] += K[None, :, k, None] * dy[:, :, k:]
        dK[:, k] = np.sum(u[:, :, : length - k] * dy[:, :, k:], axis=(0, 2))
    return du, dK


@pytest.mark.parametrize(
    "dtype, large, small", [(np.float64, 1e307, 1e-10), (np.float32, 1e37, 1e-5)]
)
def test_convolution_of_large_inputs_is_exact_not_nan(dtype, large, small):
    """The issue's reproducer: 64 steps of 1e307 convolved with 1e-10 gave NaN (exact 1e297)."""
    u = np.full((1, 1, 64), large, dtype)
    K = np.full((1, 1), small, dtype)
    y = causal_convolution(u, K).y
    assert y.dtype == dtype
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, direct_convolution(u, K), rtol=rtol)
    rng = np.random.default_rng(17)
    u = (rng.uniform(0.5, 1.0, size=(2, 3, 64)) * large).astype(dtype)  # the sum overflows
    K = (rng.normal(size=(3, 5)) * small).astype(dtype)
    expected = direct_convolution(u, K)
    assert np.isfinite(expected.astype(dtype)).all()
    scale = np.abs(u).max(axis=(0, 2))[None, :, None] * np.abs(K).sum(axis=1)[None, :, None]
    tolerance = 2e-6 if dtype == np.float32 else 1e-12
    assert_close_in_scale(causal_convolution(u, K).y, expected, scale, tolerance)
    y, spectra = causal_convolution(u, K, return_spectra=True)
    assert_close_in_scale(y, expected, scale, tolerance)
    assert spectra.u_exponent.shape == (2, 3) and spectra.kernel_exponent.shape == (3,)


def test_convolution_whose_exact_result_overflows_raises():
    """1e200 x 1e200 gave NaN everywhere; the exact 1e400 is not a double."""
    u = np.full((2, 3, 16), 1e200)
    with pytest.raises(ValueError, match="convolution's outputs overflow float64"):
        causal_convolution(u, np.full((3, 4), 1e200))
    with pytest.raises(ValueError, match="outputs overflow float32"):
        causal_convolution(np.full((1, 1, 8), 1e30, np.float32), np.full((1, 2), 1e30))


def test_large_channels_leave_the_ordinary_ones_exact():
    """Each sequence and kernel is scaled on its own: a small channel keeps its digits."""
    rng = np.random.default_rng(3)
    u = rng.normal(size=(2, 2, 40))
    K = rng.normal(size=(2, 6))
    u[:, 0] *= 1e307
    y = causal_convolution(u, K).y
    expected = direct_convolution(u, K)
    scale = np.abs(u).max(axis=(0, 2))[None, :, None] * np.abs(K).sum(axis=1)[None, :, None]
    assert_close_in_scale(y, expected, scale, 1e-12)
    alone = causal_convolution(u[:, 1:], K[1:]).y[:, 0]
    np.testing.assert_allclose(y[:, 1], alone, rtol=1e-12, atol=1e-12)


def test_convolution_backward_of_large_inputs_is_exact_not_nan():
    rng = np.random.default_rng(5)
    u = rng.uniform(0.5, 1.0, size=(2, 2, 64)) * 1e-10
    K = rng.normal(size=(2, 5)) * 1e-10
    dy = np.full(u.shape, 1e307)
    du, dK = causal_convolution_backward(dy, u, K)
    expected_du, expected_dK = direct_convolution_backward(dy, u, K)
    assert np.isfinite(du).all() and np.isfinite(dK).all()
    scale_du = 1e307 * np.abs(K).sum(axis=1)[None, :, None]
    assert_close_in_scale(du, expected_du, scale_du, 1e-12)
    np.testing.assert_allclose(dK, expected_dK, rtol=1e-12)
    # The spectra of a forward pass that had to scale stand for u and K exactly.
    big_u = rng.normal(size=(2, 2, 64)) * 1e307
    small_dy = rng.normal(size=big_u.shape) * 1e-10
    _, spectra = causal_convolution(big_u, K * 1e9, return_spectra=True)
    assert spectra.u_exponent is not None
    from_spectra = causal_convolution_backward(small_dy, spectra=spectra)
    from_inputs = causal_convolution_backward(small_dy, big_u, K * 1e9)
    expected_du, expected_dK = direct_convolution_backward(small_dy, big_u, K * 1e9)
    for grads in (from_spectra, from_inputs):
        scale_du = np.abs(small_dy).max() * np.abs(K * 1e9).sum(axis=1)[None, :, None]
        assert_close_in_scale(grads.du, expected_du, scale_du, 1e-12)
        scale_dK = np.abs(big_u).max() * np.abs(small_dy).max() * 64 * 2
        assert_close_in_scale(grads.dK, expected_dK, scale_dK, 1e-12)
    # Unscaled spectra with a large dy: the backward scales the spectra it is given.
    _, plain = causal_convolution(u, K, return_spectra=True)
    assert plain.u_exponent is None
    du, dK = causal_convolution_backward(dy, spectra=plain)
    np.testing.assert_allclose(dK, direct_convolution_backward(dy, u, K)[1], rtol=1e-12)


def test_convolution_backward_whose_exact_gradient_overflows_raises():
    u = np.ones((1, 2, 16))
    with pytest.raises(ValueError, match="gradients du overflow float64"):
        causal_convolution_backward(np.full(u.shape, 1e200), u, np.full((2, 3), 1e200))
    with pytest.raises(ValueError, match="gradients dK overflow float64"):
        causal_convolution_backward(np.full(u.shape, 1e200), u * 1e200, np.ones((2, 3)))
