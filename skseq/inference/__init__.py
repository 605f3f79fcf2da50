"""The functional layer: exact inference on plain arrays.

Usable on its own with any parameters; the estimators call these functions
(and their underscore-prefixed cores), never the kernels directly.  Every
public name of the modules is importable from here as well:

- :mod:`~skseq.inference.hmm`: forward-backward, forward filtering, Viterbi,
  forward-only smoothing and state sampling of hidden Markov models
  (``hmm_*``, ``sample_hmm_states``);
- :mod:`~skseq.inference.hmm_varying`: the same with a transition matrix per
  row, input-driven transitions (``hmm_varying_*``, ``input_driven_log_transmats``);
- :mod:`~skseq.inference.hsmm`: the same for explicit-duration (semi-Markov)
  HMMs, over segmentations (``hsmm_*``, ``sample_hsmm_segments``);
- :mod:`~skseq.inference.gaussian`: Gaussian log-densities, weighted moments
  and the covariance layouts;
- :mod:`~skseq.inference.kalman`: the Kalman filter and smoother, one-step
  updates, forecasts, sampling and forward-only smoothing of linear-Gaussian
  state-space models (``kalman_*``, ``sample_lgssm``);
- :mod:`~skseq.inference.kalman_mle`: their exact log-likelihood gradient (the
  Fisher identity), per-row scores, a parameter transformation layer, maximum
  likelihood and standard errors (``lgssm_*``);
- :mod:`~skseq.inference.nonlinear`: sigma points, the unscented transform,
  and the unscented and extended Kalman filters, smoothers and one-step
  updates of nonlinear state-space models (``unscented_*``,
  ``extended_kalman_*``);
- :mod:`~skseq.inference.scan`: the selective scan of S6 / Mamba;
- :mod:`~skseq.inference.s4d`: the S4D kernel and the causal FFT convolution;
- :mod:`~skseq.inference.rnn`: the Elman recurrence;
- :mod:`~skseq.inference.attention`: causal scaled dot-product attention;
- :mod:`~skseq.inference.particles`: Monte Carlo filtering and importance
  sampling for models without a closed form (the deep Markov model);
- :mod:`~skseq.inference.subspace`: subspace identification of a
  linear-Gaussian state-space model from data (EM's starting point).

One calling convention throughout: arrays first, flags keyword-only, a
named tuple returned (its optional fields None when not asked for); the
gradients through a network layer's function ``f`` come from
``f_backward``.  The input checks they share are in the private module
``skseq.inference._checks``.
"""

# Each module's __all__ is the one list of its public names.
from . import (
    attention,
    gaussian,
    hmm,
    hmm_varying,
    hsmm,
    kalman,
    kalman_mle,
    nonlinear,
    particles,
    rnn,
    s4d,
    scan,
    subspace,
)
from .attention import *  # noqa: F403
from .gaussian import *  # noqa: F403
from .hmm import *  # noqa: F403
from .hmm_varying import *  # noqa: F403
from .hsmm import *  # noqa: F403
from .kalman import *  # noqa: F403
from .kalman_mle import *  # noqa: F403
from .nonlinear import *  # noqa: F403
from .particles import *  # noqa: F403
from .rnn import *  # noqa: F403
from .s4d import *  # noqa: F403
from .scan import *  # noqa: F403
from .subspace import *  # noqa: F403

__all__ = [
    *hmm.__all__,
    *hmm_varying.__all__,
    *hsmm.__all__,
    *gaussian.__all__,
    *kalman.__all__,
    *kalman_mle.__all__,
    *nonlinear.__all__,
    *scan.__all__,
    *s4d.__all__,
    *rnn.__all__,
    *attention.__all__,
    *particles.__all__,
    *subspace.__all__,
]
