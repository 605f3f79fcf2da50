"""One calling convention in the inference layer: named results, keyword-only flags,
every public name importable from skseq.inference."""

import copy
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import skseq.inference
from skseq.inference import (
    AttentionResult,
    ConvolutionResult,
    S4DKernelResult,
    causal_attention,
    causal_convolution,
    s4d_kernel,
    selective_scan,
    selective_scan_backward,
)

MODULES = [
    importlib.import_module(f"skseq.inference.{module.name}")
    for module in pkgutil.iter_modules(skseq.inference.__path__)
    if not module.name.startswith("_")
]
FUNCTIONS = [
    getattr(module, name)
    for module in MODULES
    for name in module.__all__
    if inspect.isfunction(getattr(module, name))
]


@pytest.mark.parametrize("function", FUNCTIONS, ids=lambda function: function.__name__)
def test_flags_are_keyword_only(function):
    """A bool option is never taken by position (``selective_scan(..., True)`` says nothing)."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    flags = [
        parameter.name
        for parameter in inspect.signature(function).parameters.values()
        if isinstance(parameter.default, bool) and parameter.kind in positional
    ]
    assert not flags, f"{function.__name__} takes the flags {flags} by position"


def test_selective_scan_refuses_flags_by_position():
    u = np.ones((1, 1, 3))
    arrays = (u, u, -np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1)), None, None, None)
    with pytest.raises(TypeError, match="positional argument"):
        selective_scan(*arrays, True)
    with pytest.raises(TypeError, match="positional argument"):
        selective_scan_backward(u, *arrays, True)
    assert selective_scan(*arrays, delta_softplus=True).last_state is None


def test_results_are_named_tuples_whatever_the_flags():
    """The return type does not change with a flag; the optional field is None."""
    K = s4d_kernel([0.0], [[-1.0]], [[1.0]], [[1.0]], length=4)
    assert isinstance(K, S4DKernelResult) and K.K.shape == (1, 4)
    u = np.ones((1, 1, 4))
    plain = causal_convolution(u, K.K)
    assert isinstance(plain, ConvolutionResult) and plain.spectra is None
    with_spectra = causal_convolution(u, K.K, return_spectra=True)
    assert isinstance(with_spectra, ConvolutionResult) and with_spectra.spectra is not None
    np.testing.assert_array_equal(plain.y, with_spectra.y)
    q = np.ones((1, 1, 3, 2))
    plain = causal_attention(q, q, q)
    assert isinstance(plain, AttentionResult) and plain.lse is None
    with_lse = causal_attention(q, q, q, return_lse=True)
    assert isinstance(with_lse, AttentionResult) and with_lse.lse.shape == (1, 1, 3)
    np.testing.assert_array_equal(plain.out, with_lse.out)


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__)
def test_skseq_inference_re_exports_every_public_name(module):
    missing = [name for name in module.__all__ if name not in skseq.inference.__all__]
    assert not missing, f"skseq.inference does not re-export {missing} of {module.__name__}"
    for name in module.__all__:
        assert getattr(skseq.inference, name) is getattr(module, name)


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__)
def test_no_second_names(module):
    """No module binds one of its functions under a second name (the pre-release
    names of the private cores are gone)."""
    aliases = [
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and value.__name__ != name
    ]
    assert not aliases, f"{module.__name__} binds {aliases} to functions of other names"


# The covariance layout helpers of skseq.inference.gaussian return the
# covariances (or their shape) themselves: they convert, they infer nothing.
LAYOUT_HELPERS = {"compact_covars_shape", "compact_covars", "fill_covars", "check_covars"}


def test_every_inference_function_returns_a_named_tuple():
    from test_masked_arrays import INFERENCE_EXAMPLES  # an example of every function

    checked = 0
    for function, examples in INFERENCE_EXAMPLES.items():
        if function.__name__ in LAYOUT_HELPERS:
            continue
        result = function(**copy.deepcopy(examples[0]))
        assert isinstance(result, tuple) and hasattr(type(result), "_fields"), (
            f"{function.__name__} returns a {type(result).__name__}, not a named tuple"
        )
        checked += 1
    assert checked >= 20
