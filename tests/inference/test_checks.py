"""The inference layer's one input-check module, skseq/inference/_checks.py."""

import ast
from pathlib import Path

import numpy as np
import pytest

import skseq.inference
from skseq.inference._checks import leading_array, require_arrays, require_real

INFERENCE = Path(skseq.inference.__file__).parent


def test_leading_array_sets_the_working_dtype_and_checks_the_shape():
    array, dtype = leading_array("u", np.ones((2, 3, 4), dtype=np.float32), ("b", "c", "t"))
    assert dtype == np.float32 and array.dtype == np.float32 and array.flags.c_contiguous
    array, dtype = leading_array("u", [[[1, 2]]], ("b", "c", "t"))
    assert dtype == np.float64 and array.dtype == np.float64
    # The working dtype is the argument's own, also when it is converted to another.
    array, dtype = leading_array("log_dt", np.zeros(3, np.float32), ("channels",), np.float64)
    assert dtype == np.float32 and array.dtype == np.float64
    with pytest.raises(ValueError, match=r"u must have shape \(b, c, t\), got \(2, 3\)"):
        leading_array("u", np.ones((2, 3)), ("b", "c", "t"))
    with pytest.raises(ValueError, match=r"log_dt must have shape \(channels,\), got \(\)"):
        leading_array("log_dt", 1.0, ("channels",))
    with pytest.raises(TypeError, match="u is required"):
        leading_array("u", None, ("b",))
    with pytest.raises(TypeError, match="u must be real"):
        leading_array("u", np.ones(2, dtype=complex), ("b",))
    with pytest.raises(ValueError, match="u contains NaN"):
        leading_array("u", [np.nan], ("b",))


def test_require_arrays_and_require_real():
    require_arrays(a=np.ones(1), b=[1.0])
    with pytest.raises(TypeError, match="b is required: pass an array, got None"):
        require_arrays(a=np.ones(1), b=None)
    require_real("x", np.ones(1, dtype=np.int8))
    with pytest.raises(TypeError, match="x must be real; complex inputs are not supported"):
        require_real("x", np.ones(1, dtype=np.complex64))
    with pytest.raises(TypeError, match="x must be a numeric array"):
        require_real("x", np.array(["a"]))


@pytest.mark.parametrize("module", ["scan.py", "rnn.py", "s4d.py", "attention.py", "gaussian.py"])
def test_no_inference_module_repeats_the_shared_checks(module):
    """The checks live in _checks.py: no module defines its own ``_require`` or
    compares ``dtype.kind`` with ``"c"`` (the complex-input TypeError)."""
    source = (INFERENCE / module).read_text(encoding="utf-8")
    names = {
        node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)
    }
    assert "_require" not in names
    assert 'dtype.kind == "c"' not in source
