"""Every docstring example of skseq runs as a doctest.

The examples are collected from every module of the package (the compiled
kernels have none), so a public name's example cannot go stale.  They print
rounded numbers or compare with tolerances, so BLAS rounding cannot fail
them; NORMALIZE_WHITESPACE and ELLIPSIS let array reprs wrap.
"""

import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import skseq

OPTIONS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
NUMPY_DEFAULT_PRINT_OPTIONS = dict(
    edgeitems=3,
    threshold=1000,
    floatmode="maxprec",
    precision=8,
    suppress=False,
    linewidth=75,
    nanstr="nan",
    infstr="inf",
    sign="-",
    formatter=None,
    legacy=False,
)


def _modules():
    names = ["skseq"]
    for info in pkgutil.walk_packages(skseq.__path__, prefix="skseq."):
        if not info.name.startswith("skseq._kernels"):
            names.append(info.name)
    return names


def _examples():
    finder = doctest.DocTestFinder(exclude_empty=True)
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for test in finder.find(module, name):
            if test.examples:
                found.setdefault(test.name, test)
    return [found[name] for name in sorted(found)]


EXAMPLES = _examples()


def test_the_collection_finds_the_public_examples():
    names = {test.name for test in EXAMPLES}
    for expected in (
        "skseq.hmm._gaussian.GaussianHMM",
        "skseq.inference.hmm.hmm_forward",
        "skseq.lds._lgssm.LinearGaussianSSM",
        "skseq.datasets._loaders.load_earthquakes",
    ):
        assert expected in names
    assert len(EXAMPLES) > 30


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("test", EXAMPLES, ids=[test.name for test in EXAMPLES])
def test_docstring_example(test):
    report = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    # The examples print with NumPy's default options, whatever ran before.
    with np.printoptions(**NUMPY_DEFAULT_PRINT_OPTIONS):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
