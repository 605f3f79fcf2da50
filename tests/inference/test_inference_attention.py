"""Causal attention and its backward pass against plain references.

References: the softmax of the whole masked score matrix in float64 (forward),
central finite differences in float64 for every gradient, the closed-form
gradient of that matrix computation, and PyTorch's
``scaled_dot_product_attention(is_causal=True)`` with autograd when torch is
installed.  Small tiles (``_block_rows``, ``_block_cols``) run the online
softmax over many key tiles on short sequences.
"""

import importlib
import tracemalloc

import numpy as np
import pytest
from gradient_checks import numerical_gradient
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from skseq import _kernels
from skseq.inference import (
    AttentionGradients,
    AttentionResult,
    causal_attention,
    causal_attention_backward,
)
from skseq.inference import attention as attention_module

# (block_rows, block_cols): the default, several key tiles per row block
# (online rescaling), and tiles whose sizes divide nothing.
TILINGS = [(None, None), (4, 8), (3, 7), (1, 1)]


def assert_same(actual, expected):
    """Equal up to the rounding of BLAS, whose kernels may differ with the memory layout."""
    assert_allclose(actual, expected, rtol=1e-13, atol=1e-14)


def make_qkv(rng, batch=2, n_heads=3, length=11, d_head=5, scale=1.0, dtype=np.float64):
    return [
        (scale * rng.normal(size=(batch, n_heads, length, d_head))).astype(dtype) for _ in "qkv"
    ]


def reference_attention(q, k, v, scale=None):
    """softmax(scale q k^T + causal mask) v over the whole matrix, in float64; and lse."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    length = q.shape[2]
    scores = scale * np.einsum("bhid,bhjd->bhij", q, k)
    scores = np.where(np.tril(np.ones((length, length), dtype=bool)), scores, -np.inf)
    largest = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - largest)
    total = weights.sum(axis=-1, keepdims=True)
    return (weights / total) @ v, (largest + np.log(total))[..., 0]


def reference_backward(dout, q, k, v, scale=None):
    """The gradients of sum(dout * out) from the full probability matrix."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    out, lse = reference_attention(q, k, v, scale)
    length = q.shape[2]
    mask = np.tril(np.ones((length, length), dtype=bool))
    scores = scale * np.einsum("bhid,bhjd->bhij", q, k)
    probabilities = np.where(mask, np.exp(scores - lse[..., None]), 0.0)
    grad_probabilities = dout @ np.swapaxes(v, -1, -2)
    grad_scores = probabilities * (
        grad_probabilities - np.sum(grad_probabilities * probabilities, -1, keepdims=True)
    )
    dq = scale * grad_scores @ k
    dk = scale * np.swapaxes(grad_scores, -1, -2) @ q
    dv = np.swapaxes(probabilities, -1, -2) @ dout
    return dq, dk, dv


# -- forward ----------------------------------------------------------------------------


@pytest.mark.parametrize("block_rows, block_cols", TILINGS)
@pytest.mark.parametrize("length", [1, 2, 9, 33])
def test_forward_matches_the_whole_softmax(block_rows, block_cols, length):
    rng = np.random.default_rng(length)
    q, k, v = make_qkv(rng, length=length, scale=1.5)
    out, lse = causal_attention(
        q, k, v, return_lse=True, _block_rows=block_rows, _block_cols=block_cols
    )
    expected_out, expected_lse = reference_attention(q, k, v)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    assert out.dtype == lse.dtype == np.float64
    assert_allclose(out, expected_out, rtol=1e-12, atol=1e-13)
    assert_allclose(lse, expected_lse, rtol=1e-12, atol=1e-13)


def test_result_types_and_the_plain_signature():
    rng = np.random.default_rng(0)
    q, k, v = make_qkv(rng)
    out = causal_attention(q, k, v).out
    assert isinstance(out, np.ndarray)
    result = causal_attention(q, k, v, return_lse=True)
    assert isinstance(result, AttentionResult)
    assert_array_equal(result.out, out)


def test_the_first_row_is_the_first_value_and_causality():
    """Row 0 sees only key 0; changing later keys and values leaves earlier rows alone."""
    rng = np.random.default_rng(1)
    q, k, v = make_qkv(rng, length=12)
    out = causal_attention(q, k, v, _block_rows=4, _block_cols=4).out
    assert_allclose(out[:, :, 0], v[:, :, 0], rtol=1e-14)
    k_changed, v_changed = k.copy(), v.copy()
    k_changed[:, :, 7:] = rng.normal(size=k[:, :, 7:].shape)
    v_changed[:, :, 7:] = rng.normal(size=v[:, :, 7:].shape)
    changed = causal_attention(q, k_changed, v_changed, _block_rows=4, _block_cols=4).out
    assert_allclose(changed[:, :, :7], out[:, :, :7], rtol=1e-13, atol=1e-14)
    assert not np.allclose(changed[:, :, 7:], out[:, :, 7:])


def test_scale_argument():
    rng = np.random.default_rng(2)
    q, k, v = make_qkv(rng)
    for scale in (0.01, 0.3, 4.0):
        assert_allclose(
            causal_attention(q, k, v, scale=scale).out,
            reference_attention(q, k, v, scale)[0],
            rtol=1e-12,
            atol=1e-13,
        )


def test_large_scores_are_stable():
    """Scores of several hundred: the row maximum is subtracted, nothing overflows."""
    rng = np.random.default_rng(3)
    q, k, v = make_qkv(rng, length=20, scale=12.0)
    out, lse = causal_attention(q, k, v, return_lse=True, _block_rows=3, _block_cols=6)
    expected_out, expected_lse = reference_attention(q, k, v)
    assert np.abs(expected_lse).max() > 300
    assert_allclose(out, expected_out, rtol=1e-11, atol=1e-12)
    assert_allclose(lse, expected_lse, rtol=1e-12)


def test_float32_agrees_with_float64():
    rng = np.random.default_rng(4)
    q, k, v = make_qkv(rng, batch=2, n_heads=2, length=70, d_head=16)
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    out, lse = causal_attention(q32, k32, v32, return_lse=True, _block_rows=16, _block_cols=32)
    assert out.dtype == lse.dtype == np.float32
    expected_out, expected_lse = reference_attention(q32, k32, v32)
    assert_allclose(out, expected_out, rtol=2e-5, atol=2e-6)
    assert_allclose(lse, expected_lse, rtol=2e-6, atol=2e-6)


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 2),
    n_heads=st.integers(1, 3),
    length=st.integers(1, 40),
    d_head=st.integers(1, 9),
    block_rows=st.integers(1, 12),
    block_cols=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_any_tiling_gives_the_whole_softmax(
    batch, n_heads, length, d_head, block_rows, block_cols, seed
):
    rng = np.random.default_rng(seed)
    q, k, v = make_qkv(rng, batch, n_heads, length, d_head, scale=2.0)
    dout = rng.normal(size=q.shape)
    out, lse = causal_attention(
        q, k, v, return_lse=True, _block_rows=block_rows, _block_cols=block_cols
    )
    expected_out, expected_lse = reference_attention(q, k, v)
    assert_allclose(out, expected_out, rtol=1e-11, atol=1e-12)
    assert_allclose(lse, expected_lse, rtol=1e-11, atol=1e-12)
    grads = causal_attention_backward(
        dout, q, k, v, out, lse, _block_rows=block_rows, _block_cols=block_cols
    )
    for value, expected in zip(grads, reference_backward(dout, q, k, v), strict=True):
        assert_allclose(value, expected, rtol=1e-10, atol=1e-11)


def test_memory_is_linear_in_the_length():
    """No (length, length) matrix: the peak extra memory is the outputs and one tile."""
    length, d_head = 2048, 4
    rng = np.random.default_rng(5)
    q, k, v = make_qkv(rng, batch=1, n_heads=1, length=length, d_head=d_head)
    dout = rng.normal(size=q.shape)
    out, lse = causal_attention(q, k, v, return_lse=True)
    one_matrix = length * length * 8
    for function in (
        lambda: causal_attention(q, k, v, return_lse=True),
        lambda: causal_attention_backward(dout, q, k, v, out, lse),
    ):
        tracemalloc.start()
        try:
            function()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # Outputs (at most 3 * length * d_head numbers) and two 64 x 512 tiles.
        assert peak < (3 * length * d_head + 2 * 64 * 512 + 1024) * 8 + 65536
        assert peak < one_matrix / 20


# -- backward ---------------------------------------------------------------------------


@pytest.mark.parametrize("block_rows, block_cols", [(None, None), (2, 3)])
def test_every_gradient_matches_finite_differences(block_rows, block_cols):
    rng = np.random.default_rng(6)
    q, k, v = make_qkv(rng, batch=1, n_heads=2, length=7, d_head=3)
    dout = rng.normal(size=q.shape)
    tiles = dict(_block_rows=block_rows, _block_cols=block_cols)
    assert_gradients_match_finite_differences(q, k, v, dout, tiles)


def assert_gradients_match_finite_differences(q, k, v, dout, tiles):
    """The backward pass's dq, dk, dv against central differences of the forward pass."""
    grads = causal_attention_backward(dout, q, k, v, **tiles)
    assert isinstance(grads, AttentionGradients)

    def objective():
        return float(np.sum(causal_attention(q, k, v, **tiles).out * dout))

    for name, array in zip("qkv", (q, k, v), strict=True):
        assert_allclose(
            getattr(grads, f"d{name}"),
            numerical_gradient(objective, array),
            rtol=1e-6,
            atol=1e-8,
            err_msg=name,
        )


def test_gradient_with_a_scale_matches_finite_differences():
    rng = np.random.default_rng(7)
    q, k, v = make_qkv(rng, batch=1, n_heads=1, length=6, d_head=2)
    dout = rng.normal(size=q.shape)
    grads = causal_attention_backward(dout, q, k, v, scale=2.5)

    def objective():
        return float(np.sum(causal_attention(q, k, v, scale=2.5).out * dout))

    assert_allclose(grads.dq, numerical_gradient(objective, q), rtol=1e-6, atol=1e-8)
    assert_allclose(grads.dk, numerical_gradient(objective, k), rtol=1e-6, atol=1e-8)


def test_reusing_the_forward_gives_the_recomputed_gradients():
    rng = np.random.default_rng(8)
    q, k, v = make_qkv(rng, length=40)
    dout = rng.normal(size=q.shape)
    out, lse = causal_attention(q, k, v, return_lse=True)
    reused = causal_attention_backward(dout, q, k, v, out, lse)
    recomputed = causal_attention_backward(dout, q, k, v)
    for a, b in zip(reused, recomputed, strict=True):
        assert_same(a, b)


def test_float32_backward_agrees_with_float64():
    rng = np.random.default_rng(9)
    q, k, v = make_qkv(rng, batch=1, n_heads=2, length=50, d_head=8, dtype=np.float32)
    dout = rng.normal(size=q.shape).astype(np.float32)
    grads = causal_attention_backward(dout, q, k, v, _block_rows=8, _block_cols=16)
    for value, expected in zip(grads, reference_backward(dout, q, k, v), strict=True):
        assert value.dtype == np.float32
        assert_allclose(value, expected, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-10), (np.float32, 1e-4)])
def test_torch_agrees(dtype, rtol):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    q, k, v = make_qkv(rng, batch=2, n_heads=2, length=150, d_head=8, dtype=dtype)
    dout = rng.normal(size=q.shape).astype(dtype)
    leaves = [torch.from_numpy(x.copy()).requires_grad_(True) for x in (q, k, v)]
    expected = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True)
    expected.backward(torch.from_numpy(dout))
    out, lse = causal_attention(q, k, v, return_lse=True, _block_rows=16, _block_cols=64)
    assert_allclose(out, expected.detach().numpy(), rtol=rtol, atol=rtol)
    grads = causal_attention_backward(dout, q, k, v, out, lse, _block_rows=16, _block_cols=64)
    for value, leaf in zip(grads, leaves, strict=True):
        assert_allclose(value, leaf.grad.numpy(), rtol=rtol, atol=rtol)


# -- d_head 16: the Transformer's heads --------------------------------------------------
# At d_head 16 a row of q, k or v is one whole AVX-512 vector of float32 (two of
# AVX2) and the reductions of the score products are 16 terms long.  Lengths
# that are not multiples of anything (the 64-row blocks, the register tiles
# of 4 to 12 rows, the 16 query lanes of a vector) leave partial tiles and
# vectors at every edge.


@pytest.mark.parametrize("block_rows, block_cols", [(None, None), (16, 32), (5, 11)])
@pytest.mark.parametrize("length", [1, 7, 17, 65, 130])
def test_d_head_16_matches_the_whole_softmax_and_its_gradients(block_rows, block_cols, length):
    rng = np.random.default_rng(40 + length)
    q, k, v = make_qkv(rng, batch=2, n_heads=2, length=length, d_head=16, scale=1.5)
    dout = rng.normal(size=q.shape)
    tiles = dict(_block_rows=block_rows, _block_cols=block_cols)
    out, lse = causal_attention(q, k, v, return_lse=True, **tiles)
    expected_out, expected_lse = reference_attention(q, k, v)
    assert_allclose(out, expected_out, rtol=1e-12, atol=1e-13)
    assert_allclose(lse, expected_lse, rtol=1e-12, atol=1e-13)
    grads = causal_attention_backward(dout, q, k, v, out, lse, **tiles)
    expected_grads = reference_backward(dout, q, k, v)
    for value, expected in zip(grads, expected_grads, strict=True):
        assert_allclose(value, expected, rtol=1e-10, atol=1e-11)
    # float32 against the float64 reference.
    q32, k32, v32, dout32 = (x.astype(np.float32) for x in (q, k, v, dout))
    out32, lse32 = causal_attention(q32, k32, v32, return_lse=True, **tiles)
    assert out32.dtype == lse32.dtype == np.float32
    assert_allclose(out32, expected_out, rtol=1e-4, atol=2e-5)
    assert_allclose(lse32, expected_lse, rtol=1e-5, atol=1e-5)
    grads32 = causal_attention_backward(dout32, q32, k32, v32, out32, lse32, **tiles)
    for value, expected in zip(grads32, expected_grads, strict=True):
        assert value.dtype == np.float32
        assert_allclose(value, expected, rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("length", [1, 19])
def test_d_head_16_gradients_match_finite_differences(length):
    rng = np.random.default_rng(50 + length)
    q, k, v = make_qkv(rng, batch=1, n_heads=2, length=length, d_head=16)
    dout = rng.normal(size=q.shape)
    assert_gradients_match_finite_differences(q, k, v, dout, dict(_block_rows=8, _block_cols=8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_d_head_16_heads_of_a_packed_projection_give_the_contiguous_results(dtype):
    """The Transformer's layout: several pairs (the next one prefetched), partial blocks."""
    rng = np.random.default_rng(60)
    batch, length, n_heads, d_head = 3, 150, 4, 16
    packed = rng.normal(size=(batch, length, 3, n_heads, d_head)).astype(dtype)
    q, k, v = (packed[:, :, index].transpose(0, 2, 1, 3) for index in range(3))
    dout = rng.normal(size=(batch, length, n_heads, d_head)).astype(dtype).transpose(0, 2, 1, 3)
    contiguous = [np.ascontiguousarray(x) for x in (q, k, v, dout)]
    merged = np.empty((batch, length, n_heads, d_head), dtype=dtype)
    out, lse = causal_attention(
        q, k, v, return_lse=True, out=merged.transpose(0, 2, 1, 3), check_finite=False
    )
    out_c, lse_c = causal_attention(*contiguous[:3], return_lse=True)
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    assert_allclose(out, out_c, rtol=rtol, atol=rtol)
    assert_allclose(lse, lse_c, rtol=rtol, atol=rtol)
    grad_packed = np.empty_like(packed)
    views = [grad_packed[:, :, index].transpose(0, 2, 1, 3) for index in range(3)]
    causal_attention_backward(dout, q, k, v, out, lse, dq=views[0], dk=views[1], dv=views[2])
    grads_c = causal_attention_backward(contiguous[3], *contiguous[:3], out_c, lse_c)
    for view, expected in zip(views, grads_c, strict=True):
        assert_allclose(view, expected, rtol=rtol, atol=rtol)
    # One pair at a time (no next pair to prefetch) gives the same numbers.
    for pair in range(batch * n_heads):
        b, h = divmod(pair, n_heads)
        single = causal_attention(
            q[b : b + 1, h : h + 1], k[b : b + 1, h : h + 1], v[b : b + 1, h : h + 1]
        ).out
        assert_array_equal(single[0, 0], out[b, h])


# -- layouts, threads, builds -----------------------------------------------------------


def test_strided_views_are_read_in_place_and_give_the_same_results():
    """Heads of a packed (batch, length, 3, heads, d) projection, as the Transformer passes them."""
    rng = np.random.default_rng(11)
    batch, length, n_heads, d_head = 2, 13, 3, 4
    packed = rng.normal(size=(batch, length, 3, n_heads, d_head))
    q, k, v = (packed[:, :, index].transpose(0, 2, 1, 3) for index in range(3))
    assert not q.flags.c_contiguous
    dout = rng.normal(size=(batch, length, n_heads, d_head)).transpose(0, 2, 1, 3)
    contiguous = [np.ascontiguousarray(x) for x in (q, k, v, dout)]
    out, lse = causal_attention(q, k, v, return_lse=True, _block_rows=4, _block_cols=8)
    out_c, lse_c = causal_attention(*contiguous[:3], return_lse=True, _block_rows=4, _block_cols=8)
    assert_same(out, out_c)
    assert_same(lse, lse_c)
    grads = causal_attention_backward(dout, q, k, v, out, lse, _block_rows=4, _block_cols=8)
    grads_c = causal_attention_backward(
        contiguous[3], *contiguous[:3], _block_rows=4, _block_cols=8
    )
    for a, b in zip(grads, grads_c, strict=True):
        assert_same(a, b)
    assert attention_module._as_kernel_array("q", q, np.dtype(np.float64)) is q
    # Anything else is copied: a reversed axis, a strided last axis, another dtype.
    for other in (
        q[:, :, ::-1],
        packed[..., ::2].transpose(0, 2, 1, 3, 4)[:, :, 0],
        q.astype(">f8"),
    ):
        array = attention_module._as_kernel_array("q", other, np.dtype(np.float64))
        assert array is not other and array.flags.c_contiguous


def test_results_written_into_given_arrays():
    """out, dq, dk, dv as views of packed buffers: the same numbers, no copies."""
    rng = np.random.default_rng(20)
    batch, length, n_heads, d_head = 2, 17, 3, 4
    q, k, v = make_qkv(rng, batch, n_heads, length, d_head)
    dout = rng.normal(size=q.shape)
    expected_out, expected_lse = causal_attention(q, k, v, return_lse=True, _block_rows=4)
    expected_grads = causal_attention_backward(dout, q, k, v, _block_rows=4)
    merged = np.full((batch, length, n_heads, d_head), np.nan)
    out, lse = causal_attention(
        q, k, v, return_lse=True, out=merged.transpose(0, 2, 1, 3), _block_rows=4
    )
    assert np.shares_memory(out, merged)
    assert_same(out, expected_out)
    assert_same(lse, expected_lse)
    assert causal_attention(q, k, v, out=merged.transpose(0, 2, 1, 3)).out.base is merged
    packed = np.full((batch, length, 3, n_heads, d_head), np.nan)
    views = [packed[:, :, index].transpose(0, 2, 1, 3) for index in range(3)]
    grads = causal_attention_backward(
        dout, q, k, v, out, lse, dq=views[0], dk=views[1], dv=views[2], _block_rows=4
    )
    for grad, view, expected in zip(grads, views, expected_grads, strict=True):
        assert grad is view
        assert_same(view, expected)
    # Only some of them.
    grads = causal_attention_backward(dout, q, k, v, dk=views[1], _block_rows=4)
    assert grads.dk is views[1] and not np.shares_memory(grads.dq, packed)


def test_results_into_given_arrays_in_the_float32_fallback():
    rng = np.random.default_rng(21)
    q, k, v = make_qkv(rng, batch=1, n_heads=1, length=6, d_head=3, dtype=np.float32)
    q, k = q * np.float32(1e20), k * np.float32(1e20)
    out = np.empty_like(q)
    assert causal_attention(q, k, v, out=out).out is out
    assert_allclose(out, reference_attention(q, k, v)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda q: np.empty(q.shape, dtype=np.float32), ValueError, "dtype float64"),
        (lambda q: np.empty(q.shape[:3] + (2,)), ValueError, r"shape \(2, 3, 11, 5\)"),
        (lambda q: np.empty(q.shape[::-1]).T, ValueError, "contiguous last axis"),
        (lambda q: q, ValueError, "shares memory"),
        (lambda q: q.tolist(), TypeError, "must be a numpy array"),
        (lambda q: np.broadcast_to(np.empty(q.shape[1:]), q.shape), ValueError, "read-only"),
    ],
)
def test_bad_output_arrays_raise(make, error, match):
    rng = np.random.default_rng(22)
    q, k, v = make_qkv(rng)
    dout = rng.normal(size=q.shape)
    with pytest.raises(error, match=match):
        causal_attention(q, k, v, out=make(q))
    with pytest.raises(error, match=match):
        causal_attention_backward(dout, q, k, v, dq=make(q))
    shared = np.empty(q.shape)
    with pytest.raises(ValueError, match="dq shares memory with an input or another output"):
        causal_attention_backward(dout, q, k, v, dq=shared, dk=shared)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(12)
    q, k, v = make_qkv(rng, dtype=np.float32)
    dout = rng.normal(size=q.shape).astype(np.float32)
    out, lse = causal_attention(q, k, v, return_lse=True)
    arrays = [q, k, v, dout, out, lse]
    copies = [x.copy() for x in arrays]
    causal_attention(q, k, v)
    causal_attention_backward(dout, q, k, v, out, lse)
    causal_attention_backward(dout, q, k, v)
    for original, copy in zip(arrays, copies, strict=True):
        assert_array_equal(original, copy)


@pytest.mark.parametrize("batch", [1, 3])
def test_two_jobs_equal_one(batch):
    rng = np.random.default_rng(13)
    q, k, v = make_qkv(rng, batch=batch, n_heads=3, length=30)
    dout = rng.normal(size=q.shape)
    out, lse = causal_attention(q, k, v, return_lse=True, n_jobs=1)
    out2, lse2 = causal_attention(q, k, v, return_lse=True, n_jobs=2)
    assert_same(out, out2)
    assert_same(lse, lse2)
    grads = causal_attention_backward(dout, q, k, v, out, lse, n_jobs=1)
    grads2 = causal_attention_backward(dout, q, k, v, out, lse, n_jobs=2)
    for a, b in zip(grads, grads2, strict=True):
        assert_same(a, b)


def test_mixed_dtypes_are_cast_to_q_dtype():
    rng = np.random.default_rng(14)
    q, k, v = make_qkv(rng)
    assert causal_attention(q.astype(np.float32), k, v).out.dtype == np.float32
    assert causal_attention(q, k.astype(np.float32), v).out.dtype == np.float64
    integers = np.arange(2 * 1 * 3 * 2).reshape(2, 1, 3, 2)
    assert causal_attention(integers, integers, integers).out.dtype == np.float64


def test_empty_inputs():
    for shape in [(0, 2, 5, 3), (2, 0, 5, 3), (2, 2, 0, 3)]:
        empty = np.zeros(shape)
        out, lse = causal_attention(empty, empty, empty, return_lse=True)
        assert out.shape == shape and lse.shape == shape[:3]
        grads = causal_attention_backward(empty, empty, empty, empty)
        assert all(grad.shape == shape for grad in grads)


@pytest.mark.parametrize("d_head", [8, 16])
@pytest.mark.parametrize("build", ["avx2", "avx512"])
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_vector_builds_equal_the_portable_build(monkeypatch, build, dtype, rtol, d_head):
    supported = {"avx2": _kernels.cpu_has_avx2_fma, "avx512": _kernels.cpu_has_avx512}[build]
    if not supported():
        pytest.skip(f"this CPU does not run the {build} build")
    try:
        fast = importlib.import_module(f"skseq._kernels._attention_{build}")
    except ImportError:
        pytest.skip(f"the {build} build is not available on this platform")
    rng = np.random.default_rng(15)
    q, k, v = make_qkv(rng, batch=2, n_heads=2, length=100, d_head=d_head, dtype=dtype)
    dout = rng.normal(size=q.shape).astype(dtype)
    results = []
    for module in (fast, importlib.import_module("skseq._kernels._attention")):
        monkeypatch.setattr(attention_module, "_attention", module)
        out, lse = causal_attention(q, k, v, return_lse=True, _block_rows=16, _block_cols=32)
        results.append([out, lse, *causal_attention_backward(dout, q, k, v, out, lse)])
    for fast_result, portable_result in zip(*results, strict=True):
        assert_allclose(fast_result, portable_result, rtol=rtol, atol=rtol)


def test_blas_runs_on_one_thread_inside_the_kernels(monkeypatch):
    """Tile products are small: a threaded BLAS makes them several times slower."""
    from threadpoolctl import threadpool_info, threadpool_limits

    kernels = attention_module._attention
    seen = []

    def blas_threads():
        return max(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")

    class Spy:
        def forward(self, *arguments):
            seen.append(blas_threads())
            return kernels.forward(*arguments)

        def backward(self, *arguments):
            seen.append(blas_threads())
            return kernels.backward(*arguments)

    monkeypatch.setattr(attention_module, "_attention", Spy())
    q, k, v = make_qkv(np.random.default_rng(23))
    with threadpool_limits(limits=2, user_api="blas"):
        if blas_threads() < 2:
            pytest.skip("BLAS runs on one thread here anyway")
        causal_attention_backward(q, q, k, v)
    assert seen == [1, 1]


def test_load_prefers_the_widest_build(monkeypatch):
    if not _kernels.cpu_has_avx512():
        pytest.skip("this CPU has no AVX-512")
    monkeypatch.delenv("SKSEQ_KERNELS", raising=False)  # the suite may run with "baseline"
    assert _kernels.load("_attention").__name__ == "skseq._kernels._attention_avx512"
    # Kernels without an AVX-512 build get their AVX2 one.
    assert _kernels.load("_scan").__name__ == "skseq._kernels._scan_avx2"
    monkeypatch.setenv("SKSEQ_KERNELS", "avx2")
    assert _kernels.load("_attention").__name__ == "skseq._kernels._attention_avx2"
    monkeypatch.setenv("SKSEQ_KERNELS", "baseline")
    assert _kernels.load("_attention").__name__ == "skseq._kernels._attention"


# -- overflow: exact or loud -------------------------------------------------------------


def test_float32_scores_beyond_its_range_are_computed_in_float64():
    """|q . k| of 1e40 overflows float32; the output (an average of values) does not."""
    rng = np.random.default_rng(16)
    q, k, v = make_qkv(rng, batch=1, n_heads=2, length=9, d_head=4)
    q *= 1e20
    k *= 1e20
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    assert not np.all(np.isfinite(np.einsum("bhid,bhjd->bhij", q32, k32)))
    out = causal_attention(q32, k32, v32).out
    assert out.dtype == np.float32
    expected = reference_attention(q32, k32, v32)[0]
    assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    # The log-sum-exp itself (about 1e40) does not fit float32: loud.
    with pytest.raises(ValueError, match="exceeds the float32 range"):
        causal_attention(q32, k32, v32, return_lse=True)


def test_float32_gradients_beyond_its_range_are_computed_in_float64():
    rng = np.random.default_rng(17)
    q, k, v = make_qkv(rng, batch=1, n_heads=1, length=8, d_head=3, dtype=np.float32)
    v = v * np.float32(1e37)
    dout = rng.normal(size=q.shape).astype(np.float32) * np.float32(10.0)
    # dP = dout v^T overflows float32 (about 1e38 * 3 terms), the gradients of q and k
    # (probabilities times differences of dP, times k or q) do not all.
    grads = causal_attention_backward(dout, q, k, v)
    expected = reference_backward(dout, q, k, v)
    assert not np.all(np.isfinite(np.einsum("bhid,bhjd->bhij", dout, v)))
    for value, reference in zip(grads, expected, strict=True):
        assert value.dtype == np.float32
        assert_allclose(value, reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())


def test_float64_overflow_is_loud():
    q = np.full((1, 1, 3, 2), 1e200)
    with pytest.raises(ValueError, match="overflow float64"):
        causal_attention(q, q, q)
    with pytest.raises(ValueError, match="overflow float64"):
        causal_attention_backward(np.ones_like(q), q, q, q)


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(q=np.ones((2, 3, 4))), ValueError, r"q must have shape \(batch, n_heads"),
        (dict(k=np.ones((2, 3, 4, 6))), ValueError, r"k must have shape \(2, 3, 4, 5\)"),
        (dict(v=np.ones((2, 3, 5, 5))), ValueError, r"v must have shape"),
        (
            dict(q=np.ones((2, 3, 4, 0)), k=np.ones((2, 3, 4, 0)), v=np.ones((2, 3, 4, 0))),
            ValueError,
            "d_head",
        ),
        (dict(q=np.ones((2, 3, 4, 5), dtype=complex)), TypeError, "q must be real"),
        (dict(v=np.full((2, 3, 4, 5), "a")), TypeError, "v must be a numeric array"),
        (dict(scale=0.0), ValueError, "scale must be > 0"),
        (dict(scale=np.inf), ValueError, "scale must be finite"),
        (dict(scale=np.nan), ValueError, "scale must be finite"),
        (dict(scale="big"), TypeError, "scale must be a real number"),
        (dict(scale=True), TypeError, "scale must be a real number"),
        (dict(n_jobs=0), ValueError, "n_jobs == 0 has no meaning"),
        (dict(n_jobs=1.5), TypeError, "n_jobs must be an integer"),
        (dict(check_finite="no"), TypeError, "check_finite must be a bool"),
        (dict(_block_rows=0), ValueError, "_block_rows must be >= 1"),
        (dict(_block_cols=2.5), TypeError, "_block_cols must be an integer"),
    ],
)
def test_bad_input_raises_naming_it(change, error, match):
    arrays = dict(zip("qkv", make_qkv(np.random.default_rng(0), 2, 3, 4, 5), strict=True))
    arguments = {**arrays, **change}
    with pytest.raises(error, match=match):
        causal_attention(**arguments)
    with pytest.raises(error, match=match):
        causal_attention_backward(np.ones((2, 3, 4, 5)), **arguments)


@pytest.mark.parametrize("name", ["q", "k", "v", "dout", "out", "lse"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises_naming_it(name, bad):
    rng = np.random.default_rng(18)
    q, k, v = make_qkv(rng)
    out, lse = causal_attention(q, k, v, return_lse=True)
    arrays = dict(q=q, k=k, v=v, dout=rng.normal(size=q.shape), out=out, lse=lse)
    arrays[name] = arrays[name].copy()
    arrays[name].flat[3] = bad
    with pytest.raises(ValueError, match=f"{name} contains NaN or infinity"):
        causal_attention_backward(**arrays)
    if name in "qkv":
        with pytest.raises(ValueError, match=f"{name} contains NaN or infinity"):
            causal_attention(arrays["q"], arrays["k"], arrays["v"])


@pytest.mark.parametrize("name", ["q", "k", "v", "dout", "out", "lse"])
def test_without_the_finiteness_pass_a_nan_is_still_named(name):
    """check_finite=False: the same results; a NaN shows in the results, then gets named."""
    rng = np.random.default_rng(24)
    q, k, v = make_qkv(rng)
    out, lse = causal_attention(q, k, v, return_lse=True)
    arrays = dict(q=q, k=k, v=v, dout=rng.normal(size=q.shape), out=out, lse=lse)
    assert_same(causal_attention(q, k, v, check_finite=False).out, out)
    for fast, checked in zip(
        causal_attention_backward(**arrays, check_finite=False),
        causal_attention_backward(**arrays),
        strict=True,
    ):
        assert_same(fast, checked)
    arrays[name] = arrays[name].copy()
    arrays[name].flat[3 * 5 + 1] = np.nan  # row 3 of the first head
    with pytest.raises(ValueError, match=f"{name} contains NaN or infinity"):
        causal_attention_backward(**arrays, check_finite=False)
    if name in "qkv":
        with pytest.raises(ValueError, match=f"{name} contains NaN or infinity"):
            causal_attention(arrays["q"], arrays["k"], arrays["v"], check_finite=False)


def test_return_lse_must_be_a_bool():
    q, k, v = make_qkv(np.random.default_rng(25))
    with pytest.raises(TypeError, match="return_lse must be a bool"):
        causal_attention(q, k, v, return_lse=1)


def test_backward_needs_both_or_neither_of_out_and_lse():
    rng = np.random.default_rng(19)
    q, k, v = make_qkv(rng)
    out, lse = causal_attention(q, k, v, return_lse=True)
    dout = rng.normal(size=q.shape)
    with pytest.raises(ValueError, match="both out and lse"):
        causal_attention_backward(dout, q, k, v, out=out)
    with pytest.raises(ValueError, match="both out and lse"):
        causal_attention_backward(dout, q, k, v, lse=lse)
    with pytest.raises(ValueError, match=r"lse must have shape \(2, 3, 11\)"):
        causal_attention_backward(dout, q, k, v, out, lse[..., :-1])
    with pytest.raises(ValueError, match=r"dout must have shape"):
        causal_attention_backward(dout[:1], q, k, v)
