"""System `causal_circle`: the causal ALiBi particle system on the circle of Duerinckx, Geshkovski
and Rossi ("lost in the middle", arXiv 2605.09213; definitions and the linear theory in
:mod:`dyn.attention.causal_circle`):

    theta_j' = sum_{k<j} w_jk (-beta) sin(theta_j - theta_k) e^{beta cos(theta_j - theta_k)},
    w_jk = e^{-(lambda/n)(j - k)} / sum_{k'<j} e^{-(lambda/n)(j - k')}

(`mask = "strict_causal"`: k < j, token 0 never moves; `"causal"`: token j weighs itself too;
`bias_slope` = lambda; `bias_scale = "1/n"`: the rate lambda/n per position, `"1"`: lambda).
Runs start from i.i.d. uniform angles and are solved with the configured ODE integrator to the
save times. Outputs are position profiles, dims (time, position), means over runs with their
standard errors; `position` holds `position_bins` equal bins of s = j/n (coordinate: the bin
centres), each the mean over its tokens:
- `alignment`: cos(theta_j(t) - theta_0), how far token j has joined token 0 (the fixed first
  token);
- `retrieval`: cos(theta_{n-1}(t) - theta_j(0)) over j < n-1, how much the last token's angle
  at t points at token j's initial angle (a particle-level correlation, O(1/n) per token in
  the mean-field regime: noisy; the last token itself is left out).

References (role "reference"): `t_crit`(beta), the time after which the linearized soft-accuracy
profile of the paper loses its recency arm (their script's `t_crit` with lambda of the kinetic
limit, M = `soft_width_M`, m_max = `soft_modes`), drawn along `time` over both profiles; and
`soft_profile`(beta, time, position), that linearized profile S_t(s) at the bin centres
(written, not drawn: its scale is not the particles').
"""
from __future__ import annotations

import numpy as np

from ..core.contract import bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from . import register
from .base import INTEGRATOR_KEYS, Chunk, Coord, Draw, Output, Reference, System, over_axes

causal = lazy("dyn.attention.causal_circle")

BETA_MAX = 20.0  # |beta| bound: e^{|beta|} stays far from overflow
PROFILES = ("alignment", "retrieval")


@register
class CausalCircle(System):
    name = "causal_circle"
    description = ("causal ALiBi attention on the circle (lost in the middle): position "
                   "profiles of alignment with token 0 and of the last token's retrieval")
    default_plot = "alignment"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = {
        "n": Field("int", 32, "number of tokens n", lo=2, hi=4096),
        "beta": Field("float", 1.0, "inverse temperature beta of the force "
                      "-beta sin(u) e^{beta cos u}", lo=-BETA_MAX, hi=BETA_MAX),
        "mask": Field("str", "strict_causal", "who token j attends to: k < j (strict_causal, "
                      "the paper's) or k <= j (causal)", choices=("strict_causal", "causal")),
        "bias_slope": Field("float", 1.0, "ALiBi slope lambda: weights e^{-lambda (j - k)} "
                            "(times 1/n with bias_scale = \"1/n\")", lo=0.0, hi=1e3),
        "bias_scale": Field("str", "1/n", "scale of the bias per position: lambda/n (the "
                            "paper's) or lambda", choices=("1/n", "1")),
        "position_bins": Field("int", 8, "bins of s = j/n on the position axis (every bin "
                               "needs a token other than the last: n >= 2 bins)", lo=1, hi=4096,
                               sweepable=False),
        "soft_width_M": Field("float", 8.0, "M of the reference profile's weights "
                              "exp(-pi^2 m^2 / (2 M^2))", gt=0.0, hi=1e3),
        "soft_modes": Field("int", 20, "Fourier modes m_max of the reference profile", lo=1,
                            hi=200),
    }

    def validate(self, spec) -> None:
        if spec["n"] < 2 * spec["position_bins"]:
            raise ScenarioError("params.position_bins", f"needs n >= 2 x position_bins, got "
                                f"n = {spec['n']}, position_bins = {spec['position_bins']}")

    def coords(self, setup) -> dict[str, Coord]:
        bins = int(setup.params.get("position_bins", 8))
        return {"position": Coord((np.arange(bins) + 0.5) / bins,
                                  "relative position s = j/n (bin centre)")}

    def outputs(self, setup) -> list[Output]:
        return [
            Output("alignment", "cos(theta_j(t) - theta_0) against s = j/n (mean over runs and "
                   "the bin's tokens)", "1", ("time", "position"), reduce="mean_se"),
            Output("retrieval", "cos(theta_{n-1}(t) - theta_j(0)) against s = j/n, j < n-1 "
                   "(mean over runs and the bin's tokens)", "1", ("time", "position"),
                   reduce="mean_se"),
        ]

    def run_bytes(self, spec) -> int:  # states at the save times, the solver's stages
        return bytes_of(len(spec.times) + 8, spec["n"])

    def simulate(self, spec, runs: range) -> Chunk:
        R, n = len(runs), spec["n"]
        theta0 = spec.rng.uniform(0.0, 2 * np.pi, (R, n, 1))
        p = causal.pack_causal(spec["beta"], spec["bias_slope"], n, spec["bias_scale"],
                               spec["mask"])
        states = spec.solver.get().solve(causal.causal_problem(p), theta0, spec.times)
        theta = states[..., 0]  # (R, T, n)
        align = np.cos(theta - theta[:, :, :1])
        retrieve = np.cos(theta[:, :, -1:] - theta0[:, None, :, 0])
        index = _bins(n, spec["position_bins"])
        values = {"alignment": _bin_mean(align, index),
                  "retrieval": _bin_mean(retrieve[:, :, :-1], index[:-1])}
        return Chunk(values, finite=np.isfinite(theta).all(axis=(1, 2)))

    def references(self, setup) -> list[Reference]:
        dims, cases = over_axes(setup, "beta", "n", "bias_slope", "bias_scale", "soft_width_M",
                                "soft_modes")
        shape = tuple(len(setup.axes[a]) for a in dims)
        times = setup.times
        s = self.coords(setup)["position"].values
        crit = np.full(shape, np.nan)
        profile = np.full(shape + (len(times), len(s)), np.nan)
        for index, v in cases:
            lam = causal.continuum_slope(v["bias_slope"], v["bias_scale"], int(v["n"]))
            M, modes = float(v["soft_width_M"]), int(v["soft_modes"])
            crit[index] = causal.t_crit(float(v["beta"]), lam, M, modes)
            if v["beta"] >= 0:
                for i, t in enumerate(times):
                    profile[index + (i,)] = causal.soft_profile(s, float(v["beta"]), float(t),
                                                                lam, M, modes)
        return [
            Reference("t_crit", "t_crit(beta): the linearized soft-accuracy profile loses its "
                      "recency arm after it (Duerinckx, Geshkovski, Rossi 2026)", crit, dims,
                      draw=Draw(over=PROFILES, along="time", color="tab:red", linestyle="--",
                                label=r"$t_{crit}(\beta)$")),
            Reference("soft_profile", "linearized soft-accuracy profile S_t(s) of the last "
                      "token at the bin centres (beta >= 0)", profile,
                      dims + ("time", "position")),
        ]


def _bins(n: int, bins: int) -> np.ndarray:
    """The bin of each token j: floor(j bins / n)."""
    return np.arange(n) * bins // n


def _bin_mean(values, index) -> np.ndarray:
    """Means over the tokens of each bin: values (R, T, m), index (m,) -> (R, T, bins)."""
    bins = int(index.max()) + 1
    member = (index[:, None] == np.arange(bins)[None, :]).astype(float)
    return values @ (member / member.sum(axis=0))
