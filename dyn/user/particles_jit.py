"""The numba drift of :func:`dyn.user.particles.particles`: the pair loop around the user's
interaction, in the integrators' ABI (compiled once per process, like :mod:`dyn.user.jit`)."""
from __future__ import annotations

import numba

from integrators.numba_abi import DIFFUSION_SIG, DRIFT_SIG

from .jit import OPTIONS, with_params

SA, USA, NONE, SINKHORN = 0, 1, 2, 3  # dyn.user.particles.NORMALIZATIONS, in order


def drift(phi, positions: bool, at: tuple[int, ...], normalization: int, euclidean: bool,
          iterations: int, distance: bool = False):
    """out_i = sum_j A_ij x_j (sphere; the integrator projects it) or sum_j A_ij (x_j - x_i)
    (R^d), A the normalized w_ij = phi(s_ij[, i, j], p[at]...), s_ij = <x_i, x_j> (or
    |x_i - x_j|^2 with `distance`); scratch: n^2 + 2n."""
    kernel = with_params(phi, "s, i, j" if positions else "s", at, "interaction")
    if not positions:
        plain = kernel

        @numba.njit(**OPTIONS)
        def kernel(s, i, j, p):
            return plain(s, p)

    @numba.njit(DRIFT_SIG, **OPTIONS)
    def field(t, x, p, out, work):
        n, d = x.shape
        w = work[:n * n].reshape((n, n))
        for i in range(n):
            for j in range(n):
                s = 0.0
                for k in range(d):
                    s += (x[i, k] - x[j, k]) ** 2 if distance else x[i, k] * x[j, k]
                w[i, j] = kernel(s, i, j, p)
        if normalization == SINKHORN:
            col = work[n * n:n * n + n]
            for _ in range(int(p[iterations])):
                # column sums and divisions row by row (contiguous); each column's sum still
                # adds i = 0 .. n-1 in order: the same numbers as a column-by-column pass
                col[:] = 0.0
                for i in range(n):
                    for j in range(n):
                        col[j] += w[i, j]
                for i in range(n):
                    for j in range(n):
                        w[i, j] /= col[j]
                for i in range(n):
                    r = 0.0
                    for j in range(n):
                        r += w[i, j]
                    for j in range(n):
                        w[i, j] /= r
        for i in range(n):
            z = 1.0
            if normalization == SA:
                z = 0.0
                for j in range(n):
                    z += w[i, j]
            elif normalization == USA:
                z = float(n)
            for k in range(d):
                acc = 0.0
                for j in range(n):
                    acc += w[i, j] * (x[j, k] - x[i, k] if euclidean else x[j, k])
                out[i, k] = acc / z

    return field


def diffusion(sigma_at: int):
    """out = sigma dW (the integrator projects it on the sphere)."""

    @numba.njit(DIFFUSION_SIG, **OPTIONS)
    def noise(t, x, p, dw, out, work):
        n, d = x.shape
        for i in range(n):
            for k in range(d):
                out[i, k] = p[sigma_at] * dw[i, k]

    return noise
