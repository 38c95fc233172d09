"""The discrete post-norm transformer whose depth limit is the attention flow.

One layer with step ``h = T / L``::

    x_i <- normalize(x_i + h m_i),     m_i = sum_j A_ij V x_j     (all tokens updated together)

``L`` layers of this map are the projected explicit Euler scheme of the attention flow on the
sphere, so the layer-L state converges to the flow at time ``T`` with error O(h).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange, types

from integrators.numba_abi import NJIT_PARALLEL

from .flow import _as_tokens, attention_mean_field
from .params import pack_params

_LAYERS_SIG = types.void(
    types.float64[:, :, ::1],     # x0 (E, n, d)
    types.int64,                  # depth L
    types.float64,                # h
    types.float64[::1],           # p
    types.int64[::1],             # save: sorted layer indices in [0, L]
    types.float64[:, :, :, ::1],  # states (E, len(save), n, d)
)


@njit(_LAYERS_SIG, **NJIT_PARALLEL)
def _postnorm_kernel(x0, depth, h, p, save, states):
    n_members, n, d = x0.shape
    n_save = save.shape[0]
    for e in prange(n_members):
        x = x0[e].copy()
        m = np.empty((n, d))
        s = 0
        while s < n_save and save[s] == 0:
            states[e, s] = x
            s += 1
        for layer in range(1, depth + 1):
            attention_mean_field(0.0, x, p, m)
            for i in range(n):
                nrm = 0.0
                for k in range(d):
                    y = x[i, k] + h * m[i, k]
                    x[i, k] = y
                    nrm += y * y
                inv = 1.0 / np.sqrt(nrm)
                for k in range(d):
                    x[i, k] *= inv
            while s < n_save and save[s] == layer:
                states[e, s] = x
                s += 1


def save_layers(depth: int, save_every: int | None = None, save_at=None) -> np.ndarray:
    """Sorted unique layer indices to record: ``save_at`` if given, else every ``save_every``-th
    layer plus the last, else ``[0, depth]``. Layer 0 is the input; layer k is at time ``k h``."""
    if save_at is not None:
        layers = np.unique(np.asarray(save_at, dtype=np.int64))
        if layers.size == 0 or layers[0] < 0 or layers[-1] > depth:
            raise ValueError(f"save_at must hold layer indices in [0, {depth}]")
        return layers
    if save_every is None:
        return np.array([0, depth], dtype=np.int64)
    if int(save_every) < 1:
        raise ValueError(f"save_every must be >= 1, got {save_every}")
    return np.unique(np.append(np.arange(0, depth + 1, int(save_every)), depth)).astype(np.int64)


def postnorm_layers(x0, depth: int, horizon: float, beta: float, normalization: str = "SA",
                    Q=None, K=None, V=None, *, save_every: int | None = None, save_at=None,
                    p=None) -> np.ndarray:
    """Run ``depth`` post-norm layers ``x_i <- normalize(x_i + h sum_j A_ij V x_j)``, ``h = horizon / depth``.

    ``x0``: (E, n, d) or (n, d) (rows normalized first). Returns states of shape
    (E, S, n, d) (or (S, n, d)) at the layers of :func:`save_layers` (default: input and output).
    A packed ``p`` (see ``params``) overrides beta/normalization/Q/K/V.
    """
    x0 = _as_tokens(x0)
    single = x0.ndim == 2
    x0 = x0[None] if single else x0
    if isinstance(depth, bool) or int(depth) != depth or int(depth) < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    depth = int(depth)
    horizon = float(horizon)
    if not np.isfinite(horizon) or horizon < 0:
        raise ValueError(f"horizon must be finite and >= 0, got {horizon}")
    d = x0.shape[-1]
    p = pack_params(beta, d, normalization, Q, K, V) if p is None else np.array(p, dtype=np.float64)  # a writeable copy: numba rejects read-only arrays (JAX may freeze the caller's)
    layers = save_layers(depth, save_every, save_at)
    x0 = np.ascontiguousarray(x0 / np.linalg.norm(x0, axis=-1, keepdims=True))
    states = np.empty((x0.shape[0], layers.size) + x0.shape[1:])
    _postnorm_kernel(x0, depth, horizon / depth, p, layers, states)
    return states[0] if single else states
