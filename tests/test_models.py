"""Every registered model (dyn.core.dynamics): the numba drift and its JAX twin are one function, at
random states and parameters; and the Runge-Kutta tables check themselves when built."""

import numpy as np
import pytest

import integrators
from dyn.core import dynamics
from integrators.core.tableau import ButcherTableau

MODELS = dynamics.registered()
# random draws per record. A jitted twin compiles once per shape (about 0.5-2 s of CPU on a cold
# JAX cache): the default tier draws 3 of one shape (redrawing until the shapes match the first
# draw's), the slow tier 12 of any shape.
TRIALS, TRIALS_SLOW = 3, 12


def test_every_model_module_registers_its_records():
    # the whole list: a record that stops registering (and so escapes the drift-pair test below)
    # fails here, and a new one is added here on purpose
    assert set(MODELS) == {
        "attention_flow",
        "attention_postnorm",
        "attention_post",
        "attention_post_network",
        "attention_pre",
        "attention_peri",
        "attention_ngpt",
        "attention_ngpt_network",
        "token_sde",
        "sinkformer",
        "resnet_ode",
        "momentum_first_order",
        "momentum_second_order",
        "noisy_attention",
        "noisy_fourier",
        "attention_circle",
        "causal_circle",
        "causal_circle_tangent",
    }


@pytest.mark.parametrize("name", sorted(MODELS))
def test_numba_drift_and_jax_twin_agree(name):
    _drift_pair_agrees(name, TRIALS, one_shape=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_numba_drift_and_jax_twin_agree_on_more_draws(name):
    _drift_pair_agrees(name, TRIALS_SLOW)


def _draw(record, rng, like: tuple | None):
    """A random (x, p) of `record`; when `like` is given, redrawn (at most 500 times) until its
    shapes are `like`."""
    for _ in range(500):
        x, p = record.example(rng)
        if like is None or (x.shape, np.shape(p)) == like:
            break
    return x, p


def _drift_pair_agrees(name: str, trials: int, one_shape: bool = False) -> None:
    integrators.configure_jax()  # float64
    import jax
    import jax.numpy as jnp

    record = MODELS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    like = None
    for _ in range(trials):
        x, p = _draw(record, rng, like)
        like = (x.shape, np.shape(p)) if one_shape else None
        problem = record.problem(p)
        t = float(rng.uniform(0, 2))
        work = np.empty(problem.work_size(*x.shape))
        want = np.empty_like(x)
        record.drift(t, x, np.array(p), want, work)
        # jitted: one compile of the twin costs a fraction of eager mode's compile of every op
        got = np.asarray(jax.jit(problem.drift_jax)(t, jnp.asarray(x), jnp.asarray(p)))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max()))
        if record.diffusion is not None:
            dw = rng.standard_normal(problem.noise_shape)
            want = np.empty_like(x)
            record.diffusion(t, x, np.array(p), dw, want, work)
            got = np.asarray(jax.jit(problem.diffusion_jax)(t, jnp.asarray(x), jnp.asarray(p), jnp.asarray(dw)))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(c=[0.0, 0.5, 0.5, 0.9]), "row sums"),  # a wrong node
        (dict(b=[1 / 6, 1 / 3, 1 / 3, 1 / 5]), "b.1"),  # weights not summing to 1
        (dict(b=[1 / 4, 1 / 4, 1 / 4, 1 / 4]), "b.c^2"),  # consistent, order 2 only
        (
            dict(A=[[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 0.9, 0]], c=[0.0, 0.5, 0.5, 0.9]),
            "b.c =",
        ),  # rows fixed, order lost
        (dict(A=[[0, 1.0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]]), "lower triangular"),
    ],
)
def test_a_wrong_table_fails_when_built(change, words):
    rk4 = integrators.core.tableau.RK4
    table = dict(name="bad", A=rk4.A, b=rk4.b, c=rk4.c, order=4) | change
    with pytest.raises(ValueError, match=words.replace("^", r"\^").replace(".", r"\.")):
        ButcherTableau(**table)
    ButcherTableau("rk4_copy", rk4.A, rk4.b, rk4.c, 4)  # the true table passes
