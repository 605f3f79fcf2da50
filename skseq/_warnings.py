"""Warnings about a user's call, shared by every layer (inference functions and estimators)."""

import os
import sys
import warnings

import joblib
import sklearn

__all__ = ["warn_user"]

_PACKAGE_DIRECTORY = os.path.dirname(os.path.abspath(__file__)) + os.sep
# scikit-learn wraps estimator methods (set_output's fit_transform, pipelines)
# and calls them on the user's behalf (searches, through joblib): the user's
# call is above those frames too.
_LIBRARY_DIRECTORIES = (_PACKAGE_DIRECTORY,) + tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep for module in (sklearn, joblib)
)


def warn_user(message, category=UserWarning):
    """``warnings.warn`` pointing at the user's call.

    A warning about a call (``fit`` did not converge, a parameter will be
    overwritten) belongs to the line of user code that made it: the first
    frame outside skseq, scikit-learn and joblib, however many of their
    frames lie in between.  A fixed ``stacklevel`` would point into a library whenever
    the depth differs (``fit`` through ``fit_transform``, a subclass's
    ``_fit_em``, a pipeline).
    """
    frame = sys._getframe(1)
    level = 2  # stacklevel 2 is the caller of this function
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRECTORIES):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
