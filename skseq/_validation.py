"""Masked arrays as input: numpy's (and pykalman's) way of marking missing values.

scikit-learn's validation turns a :class:`numpy.ma.MaskedArray` into its
data, which would silently treat every masked entry as observed.  Every
skseq entry point for data passes ``X`` through :func:`masked_as_nan` first:
where missing values are supported (NaN marks them), masked entries become
NaN; elsewhere a masked entry is an error.
"""

import numpy as np

__all__ = ["masked_as_nan"]


def masked_as_nan(X, *, missing_supported, owner, name="X"):
    """``X`` with its masked entries replaced by NaN, or a ValueError.

    Parameters
    ----------
    X : array-like
        Returned unchanged unless it is a masked array.
    missing_supported : bool
        Whether ``owner`` treats NaN as a missing value.  If not, a masked
        array with a masked entry raises a ValueError.
    owner : str
        Who receives ``X`` (an estimator or function name), for the message.
    name : str, default="X"
        The argument's name, for the message.

    Returns
    -------
    X : array-like
        A float64 ndarray with NaN at the masked entries (a new array: the
        caller's is never changed), the data of a masked array without
        masked entries, or ``X`` itself.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[False, True], [False, False]])
    >>> masked_as_nan(X, missing_supported=True, owner="GaussianHMM")
    array([[ 1., nan],
           [ 3.,  4.]])
    """
    if not isinstance(X, np.ma.MaskedArray):
        return X
    mask = np.ma.getmaskarray(X)
    if not mask.any():
        return np.ma.getdata(X)
    if not missing_supported:
        raise ValueError(
            f"{owner} does not support missing values, but {name} is a masked array with "
            f"{int(mask.sum())} masked entries; remove them or fill them in before passing "
            f"{name} (the masked entries would otherwise be read as observed)."
        )
    try:
        data = np.array(np.ma.getdata(X), dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric: {error}") from None
    data[mask] = np.nan
    return data
