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
  the mean-field regime: noisy; the last token itself is left out);
- `soft_accuracy`: the particle soft-accuracy profile, what the U-shape claim is about,

      n E[ sum_m omega_m cos(m u_j) J_j ],   u_j = theta_{n-1}(t) - theta_j(0),
      J_j = d theta_{n-1}(t) / d theta_j(0),

  over j < n-1 (omega_m, M = `soft_width_M`, m <= `soft_modes`: the reference profile's
  weights). The sensitivity J_j is integrated along each run with the angles (the tangent flow
  dJ/dt = DF J, DF lower triangular: dyn.attention.causal_circle.causal_tangent_drift). Why it,
  and not `retrieval`: for a uniform start, integrating by parts in theta_j(0) (theta_{n-1}(t)
  is a smooth function of it, periodic) gives E[sin(m u_j) m (1 - J_j)] = 0 term by term, i.e.
  E[cos(m u_j)]-type responses of the last token to token j are carried by J_j: weighting by
  the sensitivity removes the part of cos(m u_j) that does not respond to token j's start,
  which is most of its variance (20 to 100 times less noise per token, measured by a referee);
- `soft_accuracy_cos`: the same with the cosine kernel alone, n E[cos(u_j) J_j].

References (role "reference"): `t_crit`(beta), the time after which the linearized soft-accuracy
profile of the paper loses its recency arm (their script's `t_crit` with lambda of the kinetic
limit, M = `soft_width_M`, m_max = `soft_modes`), drawn along `time` over `soft_accuracy`, and
`t_crit_cos`, the cosine kernel's own threshold 2 (1 - e^{-lambda}) / a_1, over
`soft_accuracy_cos`; `soft_accuracy_linear` and `soft_accuracy_cos_linear`, the finite-n linear
theory n sum_m omega_m [exp(a_m t W)]_{n-1, j} (W the causal weights; the cosine kernel: mode
1 alone) in the same bins, drawn over the particles'; `soft_profile`(beta, time, position), the
continuum profile S_t(s) at the bin centres, and `soft_profile_cos`, its cosine kernel g_{a_1}.
"""

from __future__ import annotations

import numpy as np

from ..core.contract import bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import INTEGRATOR_KEYS, Chunk, Coord, Draw, Output, Reference, System, over_axes
from . import register

causal = lazy("dyn.attention.causal_circle")

BETA_MAX = 20.0  # |beta| bound: e^{|beta|} stays far from overflow
PROFILES = ("alignment", "retrieval")
SOFT = ("soft_accuracy", "soft_accuracy_cos")
PROFILE = Draw(profile=("position", "time"))  # curves against s at a few times


@register
class CausalCircle(System):
    name = "causal_circle"
    description = (
        "causal ALiBi attention on the circle (lost in the middle): the last token's "
        "soft accuracy against position (through its sensitivities), alignment"
    )
    default_plot = "soft_accuracy"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = {
        "n": Field("int", 32, "number of tokens n", lo=2, hi=4096),
        "beta": Field(
            "float", 1.0, "inverse temperature beta of the force -beta sin(u) e^{beta cos u}", lo=-BETA_MAX, hi=BETA_MAX
        ),
        "mask": Field(
            "str",
            "strict_causal",
            "who token j attends to: k < j (strict_causal, the paper's) or k <= j (causal)",
            choices=("strict_causal", "causal"),
        ),
        "bias_slope": Field(
            "float",
            1.0,
            'ALiBi slope lambda: weights e^{-lambda (j - k)} (times 1/n with bias_scale = "1/n")',
            lo=0.0,
            hi=1e3,
        ),
        "bias_scale": Field(
            "str", "1/n", "scale of the bias per position: lambda/n (the paper's) or lambda", choices=("1/n", "1")
        ),
        "position_bins": Field(
            "int",
            8,
            "bins of s = j/n on the position axis (every bin needs a token other than the last: n >= 2 bins)",
            lo=1,
            hi=4096,
            sweepable=False,
        ),
        "soft_width_M": Field(
            "float", 8.0, "M of the reference profile's weights exp(-pi^2 m^2 / (2 M^2))", gt=0.0, hi=1e3
        ),
        "soft_modes": Field("int", 20, "Fourier modes m_max of the reference profile", lo=1, hi=200),
    }

    def validate(self, spec) -> None:
        if spec["n"] < 2 * spec["position_bins"]:
            raise ScenarioError(
                "params.position_bins",
                f"needs n >= 2 x position_bins, got n = {spec['n']}, position_bins = {spec['position_bins']}",
            )

    def coords(self, setup) -> dict[str, Coord]:
        bins = int(setup.params.get("position_bins", 8))
        return {"position": Coord((np.arange(bins) + 0.5) / bins, "relative position s = j/n (bin centre)")}

    def outputs(self, setup) -> list[Output]:
        return [
            Output(
                "alignment",
                "cos(theta_j(t) - theta_0) against s = j/n (mean over runs and the bin's tokens)",
                "1",
                ("time", "position"),
                reduce="mean_se",
            ),
            Output(
                "retrieval",
                "cos(theta_{n-1}(t) - theta_j(0)) against s = j/n, j < n-1 (mean over runs and the bin's tokens)",
                "1",
                ("time", "position"),
                reduce="mean_se",
            ),
            Output(
                "soft_accuracy",
                "soft accuracy n E[sum_m omega_m cos(m u_j) dtheta_{n-1}/"
                "dtheta_j(0)] of the last token against s = j/n (mean over runs and the "
                "bin's tokens)",
                "1",
                ("time", "position"),
                reduce="mean_se",
                draw=PROFILE,
            ),
            Output(
                "soft_accuracy_cos",
                "cosine soft accuracy n E[cos(u_j) dtheta_{n-1}/"
                "dtheta_j(0)] against s = j/n (mean over runs and the bin's tokens)",
                "1",
                ("time", "position"),
                reduce="mean_se",
                draw=PROFILE,
            ),
        ]

    def run_bytes(self, spec) -> int:  # states at the save times (with J: n + 1 columns)
        columns = 1 + spec["n"] if _tangent(spec) else 1
        return bytes_of(len(spec.times) + 8, spec["n"], columns)

    def simulate(self, spec, runs: range) -> Chunk:
        R, n = len(runs), spec["n"]
        theta0 = spec.rng.uniform(0.0, 2 * np.pi, (R, n, 1))
        p = causal.pack_causal(spec["beta"], spec["bias_slope"], n, spec["bias_scale"], spec["mask"])
        status = None  # the integrator's per run (max_steps is named in the point's message)
        if _tangent(spec):
            theta, J = causal.flow_with_tangent(theta0[..., 0], spec.times, p, spec.solver.get())
        else:
            solution = spec.solver.get().solve(causal.causal_problem(p), theta0, spec.times)
            theta, status = solution.states[..., 0], solution.status
        align = np.cos(theta - theta[:, :, :1])  # theta (R, T, n)
        u = theta[:, :, -1:] - theta0[:, None, :, 0]  # u_j = theta_{n-1}(t) - theta_j(0)
        index = _bins(n, spec["position_bins"])
        values = {"alignment": _bin_mean(align, index), "retrieval": _bin_mean(np.cos(u)[:, :, :-1], index[:-1])}
        finite = np.isfinite(theta).all(axis=(1, 2))
        if _tangent(spec):
            last = J[:, :, -1, :-1]  # d theta_{n-1}(t) / d theta_j(0), j < n-1
            omega = causal.soft_weights(spec["soft_width_M"], spec["soft_modes"])
            m = np.arange(1, len(omega) + 1)
            kernel = np.cos(u[..., :-1, None] * m) @ omega  # sum_m omega_m cos(m u_j)
            values["soft_accuracy"] = n * _bin_mean(kernel * last, index[:-1])
            values["soft_accuracy_cos"] = n * _bin_mean(np.cos(u[..., :-1]) * last, index[:-1])
            finite &= np.isfinite(last).all(axis=(1, 2))
        return Chunk(values, finite=finite, status=status)

    def references(self, setup) -> list[Reference]:
        times = setup.times
        s = self.coords(setup)["position"].values
        dims, cases = over_axes(setup, "beta", "n", "bias_slope", "bias_scale", "soft_width_M", "soft_modes", "mask")
        shape = tuple(len(setup.axes[a]) for a in dims)
        crit, crit_cos = np.full(shape, np.nan), np.full(shape, np.nan)
        grid = shape + (len(times), len(s))
        profile, profile_cos = np.full(grid, np.nan), np.full(grid, np.nan)
        linear, linear_cos = np.full(grid, np.nan), np.full(grid, np.nan)
        for index, v in cases:
            n, beta = int(v["n"]), float(v["beta"])
            lam = causal.continuum_slope(v["bias_slope"], v["bias_scale"], n)
            M, modes = float(v["soft_width_M"]), int(v["soft_modes"])
            crit[index] = causal.t_crit(beta, lam, M, modes)
            crit_cos[index] = causal.t_crit_cos(beta, lam)
            if beta < 0:
                continue
            for i, t in enumerate(times):
                profile[index + (i,)] = causal.soft_profile(s, beta, float(t), lam, M, modes)
                profile_cos[index + (i,)] = causal.cos_profile(s, beta, float(t), lam)
            bins = _bins(n, len(s))[:-1]
            rate = causal.bias_rate(v["bias_slope"], v["bias_scale"], n)
            own = v["mask"] == "causal"
            weights = causal.soft_weights(M, modes)
            response = causal.linear_response(beta, n, rate, times, weights, own)[:, :-1]
            linear[index] = _bin_mean(response, bins)
            response = causal.linear_response(beta, n, rate, times, [1.0], own)[:, :-1]
            linear_cos[index] = _bin_mean(response, bins)
        profiles = dims + ("time", "position")
        return [
            Reference(
                "t_crit",
                "t_crit(beta): the linearized soft-accuracy profile loses its "
                "recency arm after it (Duerinckx, Geshkovski, Rossi 2026)",
                crit,
                dims,
                draw=Draw(
                    over=PROFILES + SOFT[:1], along="time", color="tab:red", linestyle="--", label=r"$t_{crit}(\beta)$"
                ),
            ),
            Reference(
                "t_crit_cos",
                "t_crit,1(beta) = 2 (1 - e^{-lambda}) / a_1: the cosine "
                "kernel's profile loses its recency arm after it",
                crit_cos,
                dims,
                draw=Draw(over=SOFT[1:], along="time", color="tab:red", linestyle="--", label=r"$t_{crit,1}(\beta)$"),
            ),
            Reference(
                "soft_accuracy_linear",
                "finite-n linear theory n sum_m omega_m [exp(a_m t W)]_{n-1,j} of the soft accuracy (bin means)",
                linear,
                profiles,
                draw=Draw(over=SOFT[:1], color="black", linestyle="--", label="linear theory (finite n)"),
            ),
            Reference(
                "soft_accuracy_cos_linear",
                "finite-n linear theory n [exp(a_1 t W)]_{n-1,j} of the cosine soft accuracy (bin means)",
                linear_cos,
                profiles,
                draw=Draw(over=SOFT[1:], color="black", linestyle="--", label="linear theory (finite n)"),
            ),
            Reference(
                "soft_profile",
                "continuum linearized soft-accuracy profile S_t(s) of the last token at the bin centres (beta >= 0)",
                profile,
                profiles,
            ),
            Reference(
                "soft_profile_cos",
                "continuum cosine profile g_{a_1}(t, 1; s) at the bin centres (beta >= 0)",
                profile_cos,
                profiles,
            ),
        ]


def _tangent(spec) -> bool:
    """Whether the runs integrate their sensitivities (only when a soft accuracy is kept)."""
    return any(spec.setup.keeps(name) for name in SOFT)


def _bins(n: int, bins: int) -> np.ndarray:
    """The bin of each token j: floor(j bins / n)."""
    return np.arange(n) * bins // n


def _bin_mean(values, index) -> np.ndarray:
    """Means over the tokens of each bin: values (R, T, m), index (m,) -> (R, T, bins)."""
    bins = int(index.max()) + 1
    member = (index[:, None] == np.arange(bins)[None, :]).astype(float)
    return values @ (member / member.sum(axis=0))
