"""Test problems with known or tightly computed solutions, in numba (DRIFT_SIG) and JAX form.

Module-level functions so that numba caches them and the diffrax backend's per-drift jit cache
sees one identity per problem.
"""

import numpy as np
from scipy.integrate import solve_ivp

from integrators.numba.abi import DRIFT_SIG, NJIT
from integrators.numba.jit import njit

# --- Euclidean: logistic x cos-growth, closed form ------------------------------------------
# x1' = r x1 (1 - x1),  x2' = w cos(t) x2;   p = (r, w);  state (n=1, d=2).


@njit(DRIFT_SIG, **NJIT)
def logistic_drift(t, x, p, out, work):
    out[0, 0] = p[0] * x[0, 0] * (1.0 - x[0, 0])
    out[0, 1] = p[1] * np.cos(t) * x[0, 1]


def logistic_drift_jax(t, x, p):
    import jax.numpy as jnp

    return jnp.stack([p[0] * x[:, 0] * (1.0 - x[:, 0]), p[1] * jnp.cos(t) * x[:, 1]], axis=-1)


def logistic_exact(x0, p, t, t0=0.0):
    """x(t0) = x0 (E, 1, 2) -> x(t) (E, 1, 2)."""
    r, w = p
    x1 = 1.0 / (1.0 + (1.0 / x0[..., 0] - 1.0) * np.exp(-r * (t - t0)))
    x2 = x0[..., 1] * np.exp(w * (np.sin(t) - np.sin(t0)))
    return np.stack([x1, x2], axis=-1)


LOGISTIC_P = np.array([1.5, 0.8])
LOGISTIC_X0 = np.array([[[0.2, 1.0]], [[0.7, -0.5]], [[0.05, 2.0]]])


# --- Sphere: a non-tangent, time-dependent, interacting field -------------------------------
# f_i(t, x) = B x_i + cos(w t) (1/n) sum_j <x_i, x_j> x_j  (B a general d x d matrix),
# p = (B.ravel(), w). The integrators project f onto the tangent space of each x_i.


@njit(DRIFT_SIG, **NJIT)
def sphere_drift(t, x, p, out, work):
    n, d = x.shape
    a = np.cos(p[d * d] * t) / n
    for i in range(n):
        for k in range(d):
            acc = 0.0
            for m in range(d):
                acc += p[k * d + m] * x[i, m]
            out[i, k] = acc
        for j in range(n):
            g = 0.0
            for m in range(d):
                g += x[i, m] * x[j, m]
            for k in range(d):
                out[i, k] += a * g * x[j, k]


def sphere_drift_jax(t, x, p):
    import jax.numpy as jnp

    d = x.shape[-1]
    B = p[: d * d].reshape(d, d)
    a = jnp.cos(p[d * d] * t) / x.shape[0]
    return x @ B.T + a * (x @ x.T) @ x


def sphere_drift_np(t, x, p):
    d = x.shape[-1]
    B = p[: d * d].reshape(d, d)
    return x @ B.T + np.cos(p[d * d] * t) / x.shape[0] * (x @ x.T) @ x


def sphere_project_np(x, v):
    return v - (np.sum(x * v, -1, keepdims=True) / np.sum(x * x, -1, keepdims=True)) * x


def sphere_reference(x0, p, ts, rtol=1e-13, atol=1e-13):
    """The exact flow of x' = P_x f(t, x) by DOP853 at tight tolerance: (E, T, n, d)."""
    shape = x0.shape[1:]

    def rhs(t, y):
        x = y.reshape(shape)
        return sphere_project_np(x, sphere_drift_np(t, x, p)).ravel()

    out = []
    for x in x0:
        sol = solve_ivp(rhs, (ts[0], ts[-1]), x.ravel(), method="DOP853", t_eval=ts, rtol=rtol, atol=atol)
        out.append(sol.y.T.reshape((len(ts),) + shape))
    return np.array(out)


def _sphere_setup():
    rng = np.random.default_rng(12345)
    d = 3
    B = rng.normal(size=(d, d))
    p = np.concatenate([B.ravel(), [2.0]])
    x0 = rng.normal(size=(3, 4, d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    return p, x0


SPHERE_P, SPHERE_X0 = _sphere_setup()


# --- Blow-up: x' = x^2, x(t) = x0 / (1 - x0 t), infinite at t = 1/x0 ---------------------------


@njit(DRIFT_SIG, **NJIT)
def blowup_drift(t, x, p, out, work):
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[i, k] = x[i, k] * x[i, k]


def blowup_drift_jax(t, x, p):
    return x * x


# --- Slow oracle: one explicit RK step in numpy, two projection variants ----------------------


def rk_oracle(f, project, retract, tab, x0, t0, t1, n_steps, mode="stages"):
    """Integrate one member with n_steps equal steps of the table ``tab``; three variants:

    - "stages": the projection method, k_i = P_{Y_i} f(Y_i), x' = R(x + h sum b_i k_i);
    - "increment": as "stages", and the summed increment is projected again at x;
    - "increment_only": raw stages k_i = f(Y_i), only the increment is projected at x.
    """
    h = (t1 - t0) / n_steps
    x = x0.copy()
    for j in range(n_steps):
        t = t0 + j * h
        k = []
        for i in range(tab.stages):
            y = x + h * sum(tab.A[i, m] * k[m] for m in range(i)) if i else x.copy()
            v = f(t + tab.c[i] * h, y)
            k.append(v if mode == "increment_only" else project(y, v))
        incr = sum(tab.b[i] * k[i] for i in range(tab.stages))
        x = retract(x + h * (incr if mode == "stages" else project(x, incr)))
    return x
