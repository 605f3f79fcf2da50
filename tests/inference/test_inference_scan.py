"""Selective scan and its backward pass against plain references.

References: a sequential numpy loop over time (forward, and a backward that
stores every state), central finite differences in float64 for every
gradient, and PyTorch autograd through the same recurrence when torch is
installed.
"""

import itertools
import os

import numpy as np
import pytest

from skseq.inference.scan import ScanGradients, selective_scan, selective_scan_backward

INPUT_NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
GRADIENT_NAMES = ("du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias")


def make_inputs(
    rng,
    batch=2,
    channels=3,
    length=9,
    n_state=5,
    selective=True,
    with_D=True,
    with_z=True,
    with_bias=True,
    softplus=True,
    dtype=np.float64,
):
    """Random scan inputs with Mamba-like scales (A < 0, moderate steps).

    Without ``softplus`` the raw steps delta + delta_bias are kept positive, as
    a negative step makes the state grow like exp(|dt A| t).
    """
    shape = (batch, channels, length)
    projection_shape = (batch, n_state, length) if selective else (channels, n_state)
    inputs = {
        "u": rng.normal(size=shape),
        "delta": rng.normal(scale=0.5, size=shape) if softplus else rng.uniform(0.05, 0.8, shape),
        "A": -np.exp(rng.normal(scale=0.5, size=(channels, n_state))),
        "B": rng.normal(size=projection_shape),
        "C": rng.normal(size=projection_shape),
        "D": rng.normal(size=channels) if with_D else None,
        "z": rng.normal(size=shape) if with_z else None,
        "delta_bias": (
            rng.normal(scale=0.5, size=channels) if softplus else rng.uniform(0.0, 0.2, channels)
        )
        if with_bias
        else None,
    }
    return {name: None if value is None else value.astype(dtype) for name, value in inputs.items()}


def reference_steps(u, delta, A, B, C, delta_bias, delta_softplus):
    """Steps dt, their slope d dt / d delta and the per-step B_t, C_t (float64)."""
    u, delta, A = (np.asarray(x, dtype=np.float64) for x in (u, delta, A))
    raw = delta + (0.0 if delta_bias is None else np.asarray(delta_bias, np.float64)[:, None])
    if delta_softplus:
        dt = np.logaddexp(0.0, raw)
        slope = 1.0 / (1.0 + np.exp(-raw))
    else:
        dt, slope = raw, np.ones_like(raw)
    B, C = np.asarray(B, np.float64), np.asarray(C, np.float64)

    def at(projection, t):
        # (batch or 1, 1 or channels, N) for broadcasting against (batch, channels, N).
        return projection[None] if projection.ndim == 2 else projection[:, None, :, t]

    return u, dt, slope, A, (lambda t: at(B, t)), (lambda t: at(C, t))


def reference_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """Sequential numpy loop over time, in float64; returns (out, last state)."""
    u, dt, _, A, B_at, C_at = reference_steps(u, delta, A, B, C, delta_bias, delta_softplus)
    state = np.zeros(u.shape[:2] + (A.shape[1],))
    y = np.zeros_like(u)
    for t in range(u.shape[2]):
        state = np.exp(dt[..., t, None] * A) * state + dt[..., t, None] * B_at(t) * u[..., t, None]
        y[..., t] = (state * C_at(t)).sum(axis=-1)
    if D is not None:
        y = y + np.asarray(D, np.float64)[:, None] * u
    if z is not None:
        z = np.asarray(z, np.float64)
        y = y * z / (1.0 + np.exp(-z))
    return y, state


def reference_backward(
    dout, u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False
):
    """The backward pass of doc/user_guide/selective_ssm.rst in numpy, storing every state
    (float64, small inputs only)."""
    u, dt, slope, A, B_at, C_at = reference_steps(u, delta, A, B, C, delta_bias, delta_softplus)
    dout = np.asarray(dout, np.float64)
    length = u.shape[2]
    states = [np.zeros(u.shape[:2] + (A.shape[1],))]
    for t in range(length):
        decay = np.exp(dt[..., t, None] * A)
        states.append(decay * states[-1] + dt[..., t, None] * B_at(t) * u[..., t, None])
    y = np.stack([(states[t + 1] * C_at(t)).sum(-1) for t in range(length)], axis=-1)
    D64 = np.zeros(u.shape[1]) if D is None else np.asarray(D, np.float64)
    y = y + D64[:, None] * u
    if z is not None:
        z = np.asarray(z, np.float64)
        sig = 1.0 / (1.0 + np.exp(-z))
        dz = dout * y * sig * (1.0 + z * (1.0 - sig))
        dy = dout * z * sig
    else:
        dz, dy = None, dout
    grads = {"dA": np.zeros_like(A), "dB": np.zeros(np.shape(B)), "dC": np.zeros(np.shape(C))}
    du, ddt = np.zeros_like(u), np.zeros_like(u)
    g = np.zeros_like(states[0])
    for t in range(length - 1, -1, -1):
        if t < length - 1:
            g = g * np.exp(dt[..., t + 1, None] * A)
        g = g + C_at(t) * dy[..., t, None]
        decay = np.exp(dt[..., t, None] * A)
        g_h_a = g * states[t] * decay
        grads["dA"] += (g_h_a * dt[..., t, None]).sum(0)
        ddt[..., t] = (g_h_a * A).sum(-1) + (g * B_at(t)).sum(-1) * u[..., t]
        du[..., t] = (g * B_at(t)).sum(-1) * dt[..., t]
        b_term = g * (dt[..., t] * u[..., t])[..., None]
        c_term = states[t + 1] * dy[..., t, None]
        for name, term, projection in (("dB", b_term, B), ("dC", c_term, C)):
            if np.ndim(projection) == 2:
                grads[name] += term.sum(0)
            else:
                grads[name][..., t] += term.sum(1)
    du += D64[:, None] * dy
    ddelta = ddt * slope
    return ScanGradients(
        du,
        ddelta,
        grads["dA"],
        grads["dB"],
        grads["dC"],
        None if D is None else (dy * u).sum((0, 2)),
        dz,
        None if delta_bias is None else ddelta.sum((0, 2)),
    )


def assert_close(actual, expected, rtol, name=""):
    """Relative to the largest entry of ``expected`` (sums cancel entry by entry)."""
    scale = max(np.abs(expected).max(), 1e-300)
    error = np.abs(np.asarray(actual, np.float64) - expected).max() / scale
    assert error <= rtol, f"{name}: relative error {error:.3g} > {rtol:.1g}"


# ---------------------------------------------------------------- forward ---


CONFIGS = list(itertools.product([False, True], repeat=5))
CONFIG_FLAGS = ("sel", "D", "z", "bias", "softplus")
CONFIG_IDS = [
    "-".join(flag for flag, on in zip(CONFIG_FLAGS, config, strict=True) if on) or "plain"
    for config in CONFIGS
]


@pytest.mark.parametrize("selective, with_D, with_z, with_bias, softplus", CONFIGS, ids=CONFIG_IDS)
def test_forward_matches_reference(selective, with_D, with_z, with_bias, softplus):
    rng = np.random.default_rng(0)
    inputs = make_inputs(
        rng,
        batch=2,
        channels=19,
        length=70,
        n_state=5,
        selective=selective,
        with_D=with_D,
        with_z=with_z,
        with_bias=with_bias,
        softplus=softplus,
    )
    expected_out, expected_state = reference_scan(**inputs, delta_softplus=softplus)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        cast = {k: None if v is None else v.astype(dtype) for k, v in inputs.items()}
        out, state = selective_scan(**cast, delta_softplus=softplus, return_last_state=True)
        assert out.dtype == dtype and state.dtype == dtype
        assert out.shape == inputs["u"].shape and state.shape == (2, 19, 5)
        # float32 against a float64 reference of the float32-rounded inputs.
        exp32_out, exp32_state = reference_scan(**cast, delta_softplus=softplus)
        assert_close(out, exp32_out, rtol, "out")
        assert_close(state, exp32_state, rtol, "last_state")
        if dtype == np.float64:
            np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-12)


def test_forward_without_last_state_returns_none():
    inputs = make_inputs(np.random.default_rng(1), softplus=False)
    out, state = selective_scan(**inputs)
    assert state is None
    np.testing.assert_allclose(out, reference_scan(**inputs)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_state", [1, 8, 16, 17])
def test_forward_state_sizes(n_state):
    """State sizes below, at and above a multiple of the kernel's padding."""
    inputs = make_inputs(np.random.default_rng(n_state), n_state=n_state, length=20)
    out, state = selective_scan(**inputs, delta_softplus=True, return_last_state=True)
    expected_out, expected_state = reference_scan(**inputs, delta_softplus=True)
    np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(state, expected_state, rtol=1e-12, atol=1e-12)


def test_mixed_modes_selective_B_invariant_C():
    rng = np.random.default_rng(2)
    inputs = make_inputs(rng, selective=True)
    inputs["C"] = rng.normal(size=(3, 5))
    out, _ = selective_scan(**inputs, delta_softplus=True)
    np.testing.assert_allclose(
        out, reference_scan(**inputs, delta_softplus=True)[0], rtol=1e-12, atol=1e-12
    )
    grads = selective_scan_backward(np.ones_like(out), **inputs, delta_softplus=True)
    expected = reference_backward(np.ones_like(out), **inputs, delta_softplus=True)
    assert grads.dB.shape == (2, 5, 9) and grads.dC.shape == (3, 5)
    for name in GRADIENT_NAMES:
        assert_close(getattr(grads, name), getattr(expected, name), 1e-12, name)


def test_extreme_steps_underflow_and_large_exponents():
    """exp(dt A) underflowing to 0 (A dt < -745) and steps of all sizes stay exact."""
    rng = np.random.default_rng(3)
    inputs = make_inputs(rng, length=12)
    inputs["A"][0] = -2000.0  # decay exp(-2000 dt) = 0 in double precision
    inputs["delta"][:, 1] = 40.0  # softplus linear regime
    inputs["delta"][:, 2] = -40.0  # tiny steps
    out, state = selective_scan(**inputs, delta_softplus=True, return_last_state=True)
    expected_out, expected_state = reference_scan(**inputs, delta_softplus=True)
    np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(state, expected_state, rtol=1e-12, atol=1e-12)
    dout = rng.normal(size=out.shape)
    grads = selective_scan_backward(dout, **inputs, delta_softplus=True, _chunk_size=5)
    expected = reference_backward(dout, **inputs, delta_softplus=True)
    for name in GRADIENT_NAMES:
        value = getattr(grads, name)
        assert np.isfinite(value).all(), name
        assert_close(value, getattr(expected, name), 1e-11, name)


def test_exp_accuracy_over_its_range():
    """The kernel's polynomial exp through a 1-state scan: out = exp(dt * A) * 0 + ... .

    With u = [1, 0] and B = C = dt = 1, out[1] = exp(A): check it over a wide
    range of exponents against numpy, in both precisions.
    """
    exponents = np.concatenate([np.linspace(-745.0, 709.0, 2001), [-708.0, -0.5, 0.0, 1e-300]])
    n = exponents.size
    u = np.zeros((1, n, 2))
    u[:, :, 0] = 1.0
    out, _ = selective_scan(
        u, np.ones_like(u), exponents[:, None], np.ones((n, 1)), np.ones((n, 1))
    )
    expected = np.exp(exponents)
    normal = expected > 2.0**-1021  # below that the kernel flushes to zero
    np.testing.assert_allclose(out[0, normal, 1], expected[normal], rtol=4e-16, atol=0)
    assert (out[0, ~normal, 1] <= 2.0**-1021).all()
    exponents32 = np.linspace(-86.0, 88.0, 1001)
    u32 = u[:, :1001].astype(np.float32)
    out32, _ = selective_scan(
        u32, np.ones_like(u32), exponents32[:, None], np.ones((1001, 1)), np.ones((1001, 1))
    )
    np.testing.assert_allclose(out32[0, :, 1], np.exp(exponents32.astype(np.float32)), rtol=3e-7)


# --------------------------------------------------------------- backward ---


def numerical_gradient(inputs, dout, softplus, name, step=1e-6):
    """Central differences of sum(dout * out) with respect to every entry of one input."""
    values = {k: None if v is None else v.copy() for k, v in inputs.items()}
    target = values[name]
    gradient = np.zeros_like(target)
    for index in np.ndindex(target.shape):
        original = target[index]
        target[index] = original + step
        plus = np.sum(dout * reference_scan(**values, delta_softplus=softplus)[0])
        target[index] = original - step
        minus = np.sum(dout * reference_scan(**values, delta_softplus=softplus)[0])
        target[index] = original
        gradient[index] = (plus - minus) / (2 * step)
    return gradient


@pytest.mark.parametrize("selective", [False, True], ids=["invariant", "selective"])
@pytest.mark.parametrize("softplus", [False, True], ids=["raw-delta", "softplus"])
def test_every_gradient_matches_finite_differences(selective, softplus):
    rng = np.random.default_rng(4)
    inputs = make_inputs(
        rng, batch=2, channels=3, length=7, n_state=4, selective=selective, softplus=softplus
    )
    dout = rng.normal(size=inputs["u"].shape)
    grads = selective_scan_backward(dout, **inputs, delta_softplus=softplus, _chunk_size=3)
    for input_name, gradient_name in zip(INPUT_NAMES, GRADIENT_NAMES, strict=True):
        expected = numerical_gradient(inputs, dout, softplus, input_name)
        actual = getattr(grads, gradient_name)
        assert actual.shape == inputs[input_name].shape
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7, err_msg=gradient_name)


@pytest.mark.parametrize(
    "with_D, with_z, with_bias", [(False, False, False), (True, False, True), (False, True, False)]
)
@pytest.mark.parametrize("selective", [False, True], ids=["invariant", "selective"])
def test_backward_matches_reference_backward(selective, with_D, with_z, with_bias):
    rng = np.random.default_rng(5)
    inputs = make_inputs(
        rng,
        batch=3,
        channels=18,
        length=41,
        n_state=6,
        selective=selective,
        with_D=with_D,
        with_z=with_z,
        with_bias=with_bias,
    )
    dout = rng.normal(size=inputs["u"].shape)
    expected = reference_backward(dout, **inputs, delta_softplus=True)
    grads = selective_scan_backward(dout, **inputs, delta_softplus=True)
    for name in GRADIENT_NAMES:
        if getattr(expected, name) is None:
            assert getattr(grads, name) is None, name
            continue
        assert getattr(grads, name).dtype == np.float64
        assert_close(getattr(grads, name), getattr(expected, name), 1e-12, name)
    cast = {k: None if v is None else v.astype(np.float32) for k, v in inputs.items()}
    grads32 = selective_scan_backward(dout.astype(np.float32), **cast, delta_softplus=True)
    expected32 = reference_backward(dout.astype(np.float32), **cast, delta_softplus=True)
    for name in GRADIENT_NAMES:
        if getattr(expected32, name) is not None:
            assert getattr(grads32, name).dtype == np.float32
            assert_close(getattr(grads32, name), getattr(expected32, name), 2e-5, name)


@pytest.mark.parametrize("selective", [False, True], ids=["invariant", "selective"])
@pytest.mark.parametrize("chunk_size", [1, 3, 16])
def test_chunked_checkpoints_equal_unchunked(selective, chunk_size):
    """Chunk sizes that divide the length or not; 1000 >= length is unchunked."""
    rng = np.random.default_rng(6)
    inputs = make_inputs(rng, batch=2, channels=20, length=50, n_state=7, selective=selective)
    dout = rng.normal(size=inputs["u"].shape)
    whole = selective_scan_backward(dout, **inputs, delta_softplus=True, _chunk_size=1000)
    chunked = selective_scan_backward(dout, **inputs, delta_softplus=True, _chunk_size=chunk_size)
    for name in GRADIENT_NAMES:
        np.testing.assert_allclose(
            getattr(chunked, name), getattr(whole, name), rtol=1e-13, atol=1e-13, err_msg=name
        )
    out_whole = selective_scan(
        **inputs, delta_softplus=True, return_last_state=True, _chunk_size=1000
    )
    out_chunked = selective_scan(
        **inputs, delta_softplus=True, return_last_state=True, _chunk_size=chunk_size
    )
    np.testing.assert_array_equal(out_chunked.out, out_whole.out)
    np.testing.assert_array_equal(out_chunked.last_state, out_whole.last_state)


@pytest.mark.parametrize("selective", [False, True], ids=["invariant", "selective"])
@pytest.mark.parametrize("batch", [1, 3])
def test_two_jobs_equal_one(selective, batch):
    """batch=1 splits channels of one sequence between the threads; batch=3 splits sequences."""
    rng = np.random.default_rng(7)
    inputs = make_inputs(rng, batch=batch, channels=21, length=30, selective=selective)
    dout = rng.normal(size=inputs["u"].shape)
    serial = selective_scan(**inputs, delta_softplus=True, return_last_state=True, n_jobs=1)
    parallel = selective_scan(**inputs, delta_softplus=True, return_last_state=True, n_jobs=2)
    np.testing.assert_array_equal(parallel.out, serial.out)
    np.testing.assert_array_equal(parallel.last_state, serial.last_state)
    g_serial = selective_scan_backward(dout, **inputs, delta_softplus=True, n_jobs=1)
    g_parallel = selective_scan_backward(dout, **inputs, delta_softplus=True, n_jobs=2)
    for name in GRADIENT_NAMES:
        np.testing.assert_allclose(
            getattr(g_parallel, name), getattr(g_serial, name), rtol=1e-13, atol=1e-13, err_msg=name
        )


def test_optional_gradients_are_none():
    inputs = make_inputs(
        np.random.default_rng(8), with_D=False, with_z=False, with_bias=False, softplus=False
    )
    grads = selective_scan_backward(np.ones(inputs["u"].shape), **inputs)
    assert grads.dD is None and grads.dz is None and grads.ddelta_bias is None
    assert isinstance(grads, ScanGradients)


def test_torch_autograd_agrees():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    for selective in (False, True):
        inputs = make_inputs(rng, batch=2, channels=4, length=33, n_state=6, selective=selective)
        dout = rng.normal(size=inputs["u"].shape)
        tensors = {k: torch.tensor(v, requires_grad=True) for k, v in inputs.items()}
        u, delta, A, B, C, D, z = (tensors[k] for k in INPUT_NAMES[:-1])
        dt = torch.nn.functional.softplus(delta + tensors["delta_bias"][:, None])
        state = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=torch.float64)
        ys = []
        for t in range(u.shape[2]):
            B_t = B[None] if B.dim() == 2 else B[:, None, :, t]
            C_t = C[None] if C.dim() == 2 else C[:, None, :, t]
            state = (
                torch.exp(dt[..., t, None] * A) * state + dt[..., t, None] * B_t * u[..., t, None]
            )
            ys.append((state * C_t).sum(-1))
        out = (torch.stack(ys, dim=-1) + D[:, None] * u) * torch.nn.functional.silu(z)
        (out * torch.tensor(dout)).sum().backward()
        ours_out, _ = selective_scan(**inputs, delta_softplus=True)
        assert_close(ours_out, out.detach().numpy(), 1e-12, "out")
        grads = selective_scan_backward(dout, **inputs, delta_softplus=True, _chunk_size=8)
        for input_name, gradient_name in zip(INPUT_NAMES, GRADIENT_NAMES, strict=True):
            # torch's softplus is linear above 20; these inputs stay far below.
            assert_close(
                getattr(grads, gradient_name),
                tensors[input_name].grad.numpy(),
                1e-11,
                gradient_name,
            )


# ------------------------------------------------------------- validation ---


def test_inputs_are_not_modified():
    rng = np.random.default_rng(10)
    for selective in (False, True):
        inputs = make_inputs(rng, selective=selective)
        dout = rng.normal(size=inputs["u"].shape)
        copies = {k: v.copy() for k, v in inputs.items()}
        dout_copy = dout.copy()
        selective_scan(**inputs, delta_softplus=True, return_last_state=True, n_jobs=2)
        selective_scan_backward(dout, **inputs, delta_softplus=True, n_jobs=2)
        for name, value in inputs.items():
            np.testing.assert_array_equal(value, copies[name], err_msg=name)
        np.testing.assert_array_equal(dout, dout_copy)


def test_mixed_dtypes_are_cast_to_u_dtype():
    inputs = make_inputs(np.random.default_rng(11), softplus=False)
    inputs["u"] = inputs["u"].astype(np.float32)
    out, state = selective_scan(**inputs, return_last_state=True)
    assert out.dtype == np.float32 and state.dtype == np.float32
    grads = selective_scan_backward(np.ones(out.shape), **inputs)
    assert all(getattr(grads, name).dtype == np.float32 for name in GRADIENT_NAMES)
    # Integer u is computed in float64; lists and non-contiguous views are accepted.
    integer_u = np.arange(2 * 3 * 9).reshape(2, 3, 9) % 3
    inputs64 = make_inputs(np.random.default_rng(11), softplus=False)
    out_int, _ = selective_scan(
        integer_u,
        inputs64["delta"],
        inputs64["A"].tolist(),
        np.asfortranarray(inputs64["B"]),
        inputs64["C"][..., ::1],
    )
    assert out_int.dtype == np.float64
    np.testing.assert_allclose(
        out_int,
        reference_scan(integer_u, inputs64["delta"], inputs64["A"], inputs64["B"], inputs64["C"])[
            0
        ],
        rtol=1e-12,
        atol=1e-12,
    )


def test_empty_batch():
    inputs = make_inputs(np.random.default_rng(12), batch=1)
    inputs = {k: v for k, v in inputs.items() if k not in ("B", "C")}
    empty = {k: (v[:0] if k in ("u", "delta", "z") else v) for k, v in inputs.items()}
    out, state = selective_scan(
        **empty, B=np.ones((3, 5)), C=np.ones((3, 5)), return_last_state=True
    )
    assert out.shape == (0, 3, 9) and state.shape == (0, 3, 5)


@pytest.mark.parametrize(
    "name, value, error, match",
    [
        ("u", np.zeros((2, 3)), ValueError, "u must have shape"),
        ("delta", np.zeros((2, 3, 8)), ValueError, "delta must have shape"),
        ("A", np.zeros((4, 5)), ValueError, "A must have shape"),
        ("A", np.zeros((3, 0)), ValueError, "at least one state"),
        ("B", np.zeros((2, 5, 8)), ValueError, "B must have shape"),
        ("C", np.zeros(5), ValueError, "C must have shape"),
        ("D", np.zeros(4), ValueError, "D must have shape"),
        ("z", np.zeros((2, 3)), ValueError, "z must have shape"),
        ("delta_bias", np.zeros((3, 1)), ValueError, "delta_bias must have shape"),
        ("A", np.full((3, 5), -1 + 1j), TypeError, "A must be real"),
        ("u", np.zeros((2, 3, 9), dtype=complex), TypeError, "u must be real"),
        ("B", np.array([["a"] * 5] * 3), TypeError, "B must be a numeric array"),
    ],
)
def test_bad_shapes_and_types_raise(name, value, error, match):
    inputs = make_inputs(np.random.default_rng(13))
    inputs[name] = value
    with pytest.raises(error, match=match):
        selective_scan(**inputs)
    with pytest.raises(error, match=match):
        selective_scan_backward(np.ones((2, 3, 9)), **inputs)


@pytest.mark.parametrize("name", INPUT_NAMES)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises_naming_it(name, bad):
    inputs = make_inputs(np.random.default_rng(14))
    inputs[name].flat[2] = bad
    with pytest.raises(ValueError, match=f"^{name} contains NaN or infinity"):
        selective_scan(**inputs)


def test_huge_finite_values_are_accepted():
    """A sum that overflows is not mistaken for an infinite entry."""
    inputs = make_inputs(np.random.default_rng(16), softplus=False)
    inputs["B"][0, 0, :2] = 1e308
    inputs["u"][0] *= 1e-3  # the states dt * B * u stay finite
    out, _ = selective_scan(**inputs)
    assert out.shape == inputs["u"].shape
    assert np.isfinite(out).all()


def test_bad_dout_and_chunk_size_raise():
    inputs = make_inputs(np.random.default_rng(15))
    with pytest.raises(ValueError, match="dout must have shape"):
        selective_scan_backward(np.ones((2, 3, 8)), **inputs)
    dout = np.ones((2, 3, 9))
    dout[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="dout contains NaN"):
        selective_scan_backward(dout, **inputs)
    for chunk_size in (0, -3):
        with pytest.raises(ValueError, match="_chunk_size must be >= 1"):
            selective_scan_backward(np.ones((2, 3, 9)), **inputs, _chunk_size=chunk_size)
    for chunk_size in (2.5, True, "8"):
        with pytest.raises(TypeError, match="_chunk_size must be an integer"):
            selective_scan_backward(np.ones((2, 3, 9)), **inputs, _chunk_size=chunk_size)


def both_passes(inputs, **options):
    """Run the forward and the backward pass with the same options."""
    forward_options = dict(options)
    backward_options = {k: v for k, v in options.items() if k != "return_last_state"}
    return (
        selective_scan(**inputs, **forward_options),
        selective_scan_backward(np.ones(inputs["u"].shape), **inputs, **backward_options),
    )


@pytest.mark.parametrize("flag", ["delta_softplus", "return_last_state"])
@pytest.mark.parametrize("value", ["no", "", 1, 0, None, np.array([True]), 1.0])
def test_flags_must_be_real_bools(flag, value):
    """A string such as "no" is truthy: taking it for True would silently change the result."""
    inputs = make_inputs(np.random.default_rng(17))
    with pytest.raises(TypeError, match=f"^{flag} must be a bool"):
        selective_scan(**inputs, **{flag: value})
    if flag == "delta_softplus":
        with pytest.raises(TypeError, match=f"^{flag} must be a bool"):
            selective_scan_backward(np.ones((2, 3, 9)), **inputs, **{flag: value})


def test_numpy_bools_are_accepted_as_flags():
    inputs = make_inputs(np.random.default_rng(18))
    plain = both_passes(inputs, delta_softplus=True, return_last_state=False)
    numpy = both_passes(inputs, delta_softplus=np.True_, return_last_state=np.False_)
    np.testing.assert_array_equal(numpy[0].out, plain[0].out)
    assert numpy[0].last_state is None
    for ours, theirs in zip(numpy[1], plain[1], strict=True):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize(
    "n_jobs, error, match",
    [
        ("2", TypeError, "n_jobs must be an integer"),
        (2.0, TypeError, "n_jobs must be an integer"),
        (True, TypeError, "n_jobs must be an integer"),
        (0, ValueError, "n_jobs == 0 has no meaning"),
    ],
)
def test_n_jobs_must_be_none_or_a_nonzero_int(n_jobs, error, match):
    inputs = make_inputs(np.random.default_rng(19))
    with pytest.raises(error, match=match):
        selective_scan(**inputs, n_jobs=n_jobs)
    with pytest.raises(error, match=match):
        selective_scan_backward(np.ones((2, 3, 9)), **inputs, n_jobs=n_jobs)


def test_numpy_integer_n_jobs_is_accepted():
    inputs = make_inputs(np.random.default_rng(20), softplus=False)
    threaded = selective_scan(**inputs, n_jobs=np.int64(2)).out
    np.testing.assert_array_equal(threaded, selective_scan(**inputs).out)


@pytest.mark.parametrize("name", ["dout", "u", "delta", "A", "B", "C"])
def test_missing_required_array_raises_naming_it(name):
    """None for a required array is a TypeError naming it, not a Cython buffer error."""
    inputs = make_inputs(np.random.default_rng(21))
    arguments = dict(inputs, dout=np.ones((2, 3, 9)))
    arguments[name] = None
    dout = arguments.pop("dout")
    with pytest.raises(TypeError, match=f"^{name} is required"):
        selective_scan_backward(dout, **arguments)
    if name != "dout":
        with pytest.raises(TypeError, match=f"^{name} is required"):
            selective_scan(**arguments)


# -- the AVX2 build ----------------------------------------------------------------


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-11), (np.float32, 2e-5)])
def test_avx2_build_equals_the_portable_build(dtype, rtol):
    """Both builds of the kernel (see skseq._kernels.load) give the same results."""
    import importlib

    from skseq import _kernels
    from skseq.inference import scan as scan_module

    if not _kernels.cpu_has_avx2_fma():
        pytest.skip("this CPU has no AVX2/FMA")
    try:
        fast = importlib.import_module("skseq._kernels._scan_avx2")
    except ImportError:
        pytest.skip("the AVX2 build is not available on this platform")
    portable = importlib.import_module("skseq._kernels._scan")
    if os.environ.get("SKSEQ_KERNELS", "") != "baseline":  # not forced portable
        assert scan_module._scan is fast
    rng = np.random.default_rng(11)
    inputs = make_inputs(rng, batch=2, channels=4, length=200, n_state=16, dtype=dtype)
    dout = rng.normal(size=inputs["u"].shape).astype(dtype)
    results = {}
    for build, module in (("avx2", fast), ("portable", portable)):
        scan_module._scan = module
        try:
            out, last = selective_scan(**inputs, delta_softplus=True, return_last_state=True)
            grads = selective_scan_backward(dout, **inputs, delta_softplus=True)
        finally:
            scan_module._scan = _kernels.load("_scan")
        results[build] = (out, last, grads)
    (out_a, last_a, grads_a), (out_p, last_p, grads_p) = results["avx2"], results["portable"]
    np.testing.assert_allclose(out_a, out_p, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(last_a, last_p, rtol=rtol, atol=rtol)
    for name, value in grads_a._asdict().items():
        np.testing.assert_allclose(
            value, getattr(grads_p, name), rtol=rtol, atol=rtol, err_msg=name
        )


# -- steps and overflow: refused or reported, never a silent inf or NaN --------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_negative_step_without_softplus_raises(dtype):
    """The issue's reproducer: a step of -1 gave NaN (float32) or -7.2e86 (float64)."""
    u = np.ones((1, 1, 3), dtype)
    ones = np.ones((1, 1), dtype)
    A = np.full((1, 1), -100, dtype)
    with pytest.raises(ValueError, match=r"delta \+ delta_bias must be >= 0.*channel 0"):
        selective_scan(u, -u, A, ones, ones)
    with pytest.raises(ValueError, match="not a discretisation"):
        selective_scan_backward(u, u, -u, A, ones, ones)


def test_negative_step_counts_the_bias():
    rng = np.random.default_rng(40)
    inputs = make_inputs(rng, softplus=False)
    inputs["delta"][...] = 0.1
    inputs["delta_bias"][...] = [0.0, -0.5, 0.0]  # channel 1 steps by -0.4
    with pytest.raises(ValueError, match="got -0.4.* in channel 1"):
        selective_scan(**inputs)
    inputs["delta"][:, 1] = 0.6  # 0.6 - 0.5 >= 0: a valid step
    inputs["delta"][0, 0, 0] = -0.2  # offset by no bias: refused
    with pytest.raises(ValueError, match="in channel 0"):
        selective_scan(**inputs)
    inputs["delta_bias"][0] = 0.3  # -0.2 + 0.3 >= 0: every step valid
    out, _ = selective_scan(**inputs)
    np.testing.assert_allclose(out, reference_scan(**inputs)[0], rtol=1e-12, atol=1e-12)


def test_negative_raw_delta_is_fine_with_softplus():
    inputs = make_inputs(np.random.default_rng(41))
    inputs["delta"][...] = -3.0
    out, _ = selective_scan(**inputs, delta_softplus=True)
    assert np.isfinite(out).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_overflowing_recurrence_raises_naming_A_and_length(dtype):
    """A > 0 over a long sequence: exp(t A) passes the dtype's range (it gave +inf)."""
    length = 2000
    u = np.ones((1, 2, length), dtype)
    A = np.array([[0.5], [-0.5]], dtype)
    ones = np.ones((2, 1), dtype)
    message = r"overflowed .*A has positive entries \(up to 0.5\).* 2000 steps"
    with pytest.raises(ValueError, match=message):
        selective_scan(u, np.ones_like(u), A, ones, ones)
    with pytest.raises(ValueError, match=message):
        selective_scan(u, np.ones_like(u), A, ones, ones, return_last_state=True)
    with pytest.raises(ValueError, match=message.replace("overflowed", "gradients overflowed")):
        selective_scan_backward(u, u, np.ones_like(u), A, ones, ones)
    # The same A over a short sequence is a valid, finite recurrence.
    short = u[..., :20]
    out, _ = selective_scan(short, np.ones_like(short), A, ones, ones)
    expected, _ = reference_scan(short, np.ones_like(short), A, ones, ones)
    np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)
    grads = selective_scan_backward(short, short, np.ones_like(short), A, ones, ones)
    assert all(np.isfinite(g).all() for g in grads if g is not None)


def test_overflow_of_stable_scan_names_the_scale():
    """With A < 0 only the inputs' scale can overflow: the message says so."""
    u = np.full((1, 1, 4), 1e300)
    A = np.full((1, 1), -0.1)
    B = np.full((1, 1), 1e300)
    ones = np.ones((1, 1))
    with pytest.raises(ValueError, match="overflowed float64: the inputs' scale is too large"):
        selective_scan(u, np.ones_like(u), A, B, ones)
