"""Cython kernels: pure numeric code on typed memoryviews, no validation.

Some kernels are built several times: portably (x86-64 baseline, SSE2) and,
on x86-64, as ``<name>_avx2`` with AVX2 and FMA, and as ``<name>_avx512``
with AVX-512.  :func:`load` picks the fastest build the CPU supports at run
time, so a built wheel still runs everywhere.  Set ``SKSEQ_KERNELS=baseline``
to force the portable build, ``SKSEQ_KERNELS=avx2`` to go no further than AVX2.
"""

import os
from importlib import import_module

__all__ = ["load", "cpu_has_avx2_fma", "cpu_has_avx512"]


def _cpu_features():
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:
            return {}
    return features


def cpu_has_avx2_fma():
    """Whether this CPU runs AVX2 and FMA code (as detected by numpy)."""
    features = _cpu_features()
    return bool(features.get("AVX2") and features.get("FMA3"))


def cpu_has_avx512():
    """Whether this CPU runs the AVX-512 builds: F, DQ, BW and VL (as detected by numpy)."""
    features = _cpu_features()
    return cpu_has_avx2_fma() and all(
        features.get(name) for name in ("AVX512F", "AVX512DQ", "AVX512BW", "AVX512VL")
    )


def load(name):
    """The kernel module ``name``, in its fastest build for this CPU."""
    choice = os.environ.get("SKSEQ_KERNELS", "")
    candidates = []
    if choice not in ("baseline", "avx2") and cpu_has_avx512():
        candidates.append("_avx512")
    if choice != "baseline" and cpu_has_avx2_fma():
        candidates.append("_avx2")
    for suffix in candidates:
        try:
            return import_module(f"{__name__}.{name}{suffix}")
        except ImportError:  # not built on this platform, or no such build of this kernel
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
