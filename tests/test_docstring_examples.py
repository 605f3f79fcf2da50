"""The Examples sections of the docstrings run and print what they show.

Every module of the library layers below the estimators (the inference
functions, the shared utilities) runs here; the estimators' examples fit
models and run in the documentation checks instead (``doc/check_snippets.py``
and ``pytest --doctest-modules skseq``).
"""

import doctest
import importlib

import numpy as np
import pytest

MODULES = [
    "skseq._buffers",
    "skseq._parallel",
    "skseq._sequences",
    "skseq.base",
    "skseq.inference.hmm",
    "skseq.inference.gaussian",
    "skseq.inference.kalman",
    "skseq.inference.kalman_mle",
    "skseq.inference.scan",
    "skseq.inference.s4d",
]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    with np.printoptions(legacy=False):
        failures, attempted = doctest.testmod(
            module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
        )
    assert failures == 0, f"{failures} of {attempted} docstring examples of {module_name} failed"
