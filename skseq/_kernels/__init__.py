"""Cython kernels: pure numeric code on typed memoryviews, no validation.

Some kernels are built twice: portably (x86-64 baseline, SSE2) and, on
x86-64, as ``<name>_avx2`` with AVX2 and FMA.  :func:`load` picks the faster
one the CPU supports at run time, so a built wheel still runs everywhere.
Set ``SKSEQ_KERNELS=baseline`` to force the portable build.
"""

import os
from importlib import import_module

__all__ = ["load", "cpu_has_avx2_fma"]


def cpu_has_avx2_fma():
    """Whether this CPU runs AVX2 and FMA code (as detected by numpy)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:
            return False
    return bool(features.get("AVX2") and features.get("FMA3"))


def load(name):
    """The kernel module ``name``, in its fastest build for this CPU."""
    if os.environ.get("SKSEQ_KERNELS", "") != "baseline" and cpu_has_avx2_fma():
        try:
            return import_module(f"{__name__}.{name}_avx2")
        except ImportError:  # not built on this platform
            pass
    try:
        return import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
        raise ImportError(_unbuilt_message(name)) from None


def _unbuilt_message(name):
    here = os.path.dirname(os.path.abspath(__file__))
    source_tree = os.path.dirname(os.path.dirname(here))
    return (
        f"skseq's compiled kernels are missing: {__name__}.{name} is not built in {here}. "
        f"This skseq is an unbuilt source tree ({source_tree}), found first on sys.path "
        "(Python puts the current directory there). Build it in place with "
        f"'pip install -e .' run in {source_tree} (or 'pip install .', which also leaves the "
        "kernels in the source tree), or run Python from another directory to use an "
        "installed skseq."
    )
