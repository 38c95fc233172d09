r"""The noisy Kuramoto model, written as a `dyn.Model` with a declared step rate:

    d theta_i = (K / n) sum_j sin(theta_j - theta_i) dt + sigma dB_i,   i = 1..n,

n identical phase oscillators (state (n, 1): the angles). With D = sigma^2 / 2 the mean-field
stationary law is proportional to exp((K r / D) cos(theta - psi)), so the order parameter
r = |mean_i e^{i theta_i}| solves r = I_1(K r / D) / I_0(K r / D): r = 0 below K_c = 2 D = sigma^2,
r > 0 above (at finite n, r_stationary is O(n^-1/2) below K_c).

`step_rate` is all the model adds for the engine's error budget: it makes `dt = "auto"`
(dt = step_tol / rate), `check_step = true` and the [integrator] keys burn_in, horizon_cap,
step_tol available. The rate is the drift's Lipschitz bound 2K (the row sums of its Jacobian):
the noise is additive in the angles, so it adds no step bias of its own. The time average
`r_stationary` needs nothing more: the default `extend` continues the runs until the window is
stationary. Run it with `dyn run kuramoto.toml` from this folder.
"""

import numpy as np

import dyn


class NoisyKuramoto(dyn.Model):
    name, description, default_plot = (
        "noisy_kuramoto",
        "noisy Kuramoto oscillators: stationary synchrony against the coupling",
        "r_stationary",
    )
    params = {
        "n": dyn.Field("int", 64, "oscillators n", lo=2, hi=100_000),
        "K": dyn.Field("float", 2.0, "coupling K", lo=0.0, hi=1e4),
        "sigma": dyn.Field("float", 1.0, "noise sigma", gt=0.0, hi=1e3),
    }

    def drift(t, x, K):  # numba-compiled; x is (n, 1), the angles
        c, s = np.cos(x), np.sin(x)
        return K * (s.mean() * c - c.mean() * s)

    def diffusion(t, x, dw, sigma):  # additive noise
        return sigma * dw

    def step_rate(self, spec):
        return 2.0 * spec["K"]

    def outputs(self, setup):
        return [dyn.Output("r_stationary", "time average of r = |mean_i e^{i theta_i}|", reduce="time_average")]

    def initial_state(self, spec, runs):
        return spec.rng.uniform(-np.pi, np.pi, (runs, spec["n"], 1))

    def observe(self, spec, states):  # states (runs, times, n, 1)
        z = np.exp(1j * states[..., 0]).mean(axis=2)
        return dyn.Chunk({"r_stationary": np.abs(z)})
