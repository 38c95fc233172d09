r"""A model observed inside the solve (docs/your_own_system.md, "Observation in the loop"):

    x_i' = -x_i + mean_j x_j   on R^{n x d}   (tokens contract to their mean, which stays put),

observed at every save time by observe_state(t, x, scale) -> (scale * mean |x_i|^2,
max_i |x_i - mean|), so no state need be stored. Stored is the same model without
observe_state, measuring the same from stored states.
"""

import numpy as np

import dyn


class Watched(dyn.Model):
    name, description, default_plot = "watched", "tokens contracting to their mean", "x2"
    params = {
        "n": dyn.Field("int", 16, "tokens", lo=1, hi=4096),
        "d": dyn.Field("int", 2, "dimension", lo=1, hi=64),
        "scale": dyn.Field("float", 1.0, "factor of x2"),
    }
    observed = ("x2", "radius")

    def drift(t, x):
        m = np.zeros(x.shape[1])
        for i in range(x.shape[0]):
            m += x[i]
        return m / x.shape[0] - x

    def observe_state(t, x, scale):
        n, d = x.shape
        m = np.zeros(d)
        total = 0.0
        for i in range(n):
            for k in range(d):
                m[k] += x[i, k] / n
                total += x[i, k] * x[i, k]
        radius = 0.0
        for i in range(n):
            r = 0.0
            for k in range(d):
                r += (x[i, k] - m[k]) ** 2
            radius = max(radius, np.sqrt(r))
        return np.array([scale * total / n, radius])

    def outputs(self, setup):
        return [
            dyn.Output("x2", "scale * mean |x_i|^2", dims=("time",)),
            dyn.Output("radius", "largest |x_i - mean|", dims=("time",)),
        ]

    def initial_state(self, spec, runs):
        return spec.rng.standard_normal((runs, spec["n"], spec["d"]))


class Stored(Watched):
    name = "stored"
    observe_state = None

    def observe(self, spec, states):
        s = np.asarray(states)
        centred = s - s.mean(axis=2, keepdims=True)
        return dyn.Chunk(
            {"x2": spec["scale"] * (s**2).sum(-1).mean(-1), "radius": np.sqrt((centred**2).sum(-1)).max(-1)}
        )
