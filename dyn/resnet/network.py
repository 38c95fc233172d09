r"""The discrete ResNet with 1/N scaling, and its approximate inverse (numpy, float64).

With ``f_n(x) = f(x; theta_n)`` (see :mod:`.weights`) and ``h = 1/N``::

    Euler:  x_{n+1} = x_n + h f_n(x_n)
    Heun:   y = x_n + h f_n(x_n),   x_{n+1} = x_n + h (f_n(x_n) + f_{n+1}(y)) / 2

the explicit Euler and Heun schemes of ``dx/ds = f(x; theta(s))`` when ``theta_n = theta(n/N)``.
The inverse steps run the same scheme backwards from ``x_{n+1}`` (what the memory-free adjoint
uses to rebuild activations instead of storing them)::

    Euler:  x_n ~ x_{n+1} - h f_n(x_{n+1})
    Heun:   y = x_{n+1} - h f_{n+1}(x_{n+1}),   x_n ~ x_{n+1} - h (f_{n+1}(x_{n+1}) + f_n(y)) / 2

Each inverse step errs by O(h^2) (Euler) or O(h^3) (Heun, when theta_{n+1} - theta_n = O(h)),
so the rebuilt input errs by O(1/N) and O(1/N^2) for smooth weights.
"""

from __future__ import annotations

import numpy as np

from .weights import activation_numpy

SCHEMES = ("euler", "heun")


def _check(x0, W, V, scheme):
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    x = np.array(x0, dtype=np.float64)
    if x.ndim != 2 or W.ndim != 3 or V.shape != (W.shape[0], W.shape[2], W.shape[1]) or W.shape[2] != x.shape[1]:
        raise ValueError(f"expected x (B, d), W (N+1, M, d), V (N+1, d, M); got {x.shape}, {W.shape}, {V.shape}")
    return x, W.shape[0] - 1


def forward(x0, W, V, scheme: str = "euler", activation: str = "tanh") -> np.ndarray:
    """x_N for inputs ``x0`` (B, d) through the N = len(W) - 1 layers (module doc)."""
    x, N = _check(x0, W, V, scheme)
    return forward_states(x0, W, V, scheme, activation, N)[-1]


def forward_states(
    x0, W, V, scheme: str = "euler", activation: str = "tanh", save_every: int | None = None
) -> np.ndarray:
    """The hidden states x_0, x_k, x_2k, ..., x_N (k = ``save_every``, dividing N; default N):
    shape (N/k + 1, B, d), the same arithmetic as :func:`forward`."""
    x, N = _check(x0, W, V, scheme)
    every = N if save_every is None else int(save_every)
    if every < 1 or N % every:
        raise ValueError(f"save_every = {save_every} must divide the {N} layers")
    sigma, h = activation_numpy(activation), 1.0 / N
    states = [x.copy()]
    for n in range(N):
        f0 = sigma(x @ W[n].T) @ V[n].T
        if scheme == "euler":
            x += h * f0
        else:
            y = x + h * f0
            x += (0.5 * h) * (f0 + sigma(y @ W[n + 1].T) @ V[n + 1].T)
        if (n + 1) % every == 0:
            states.append(x.copy())
    return np.stack(states)


def reconstruct(xN, W, V, scheme: str = "euler", activation: str = "tanh") -> np.ndarray:
    """The input rebuilt from ``xN`` by the inverse steps, layer N-1 down to 0 (module doc)."""
    x, N = _check(xN, W, V, scheme)
    sigma, h = activation_numpy(activation), 1.0 / N
    for n in range(N - 1, -1, -1):
        if scheme == "euler":
            x -= h * (sigma(x @ W[n].T) @ V[n].T)
        else:
            g1 = sigma(x @ W[n + 1].T) @ V[n + 1].T
            y = x - h * g1
            x -= (0.5 * h) * (g1 + sigma(y @ W[n].T) @ V[n].T)
    return x
