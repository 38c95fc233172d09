"""System `attention_circle`: self-attention dynamics of n tokens on the circle in angle form, any
real beta (repulsive attention for beta < 0), each run continued until it is decided: does it
synchronize, or stop at a non-synchronized equilibrium? (Derivations: :mod:`dyn.attention.circle`.)

    theta_i' = sum_j A_ij sin(theta_j - theta_i),   A_ij = e^{beta cos(theta_i - theta_j)} / Z_i

(SA: Z_i the softmax sum; USA: Z_i = n; the same equilibria with the same stability). Each run
starts from i.i.d. uniform angles and is solved with the configured ODE integrator in stretches
of `integrator.horizon`; after each stretch a run is decided when
- **synchronized**: every token lies in an arc shorter than `sync_arc` (any arc below pi only
  shrinks, to one point, whatever beta: a proven decision);
- **equilibrium** (non-synchronized): not synchronized, max_i |theta_i'| < `drift_tol`, and the
  linearized flow there is stable (every rate off the rotation negative,
  :func:`dyn.attention.circle.linear_rates`): a run lingering near a saddle is not decided;
and is otherwise continued, up to `integrator.horizon_cap` (default DEFAULT_CAP_HORIZONS
horizons; set it to the horizon for the fixed-time question). Runs still undecided then are
counted (`p_undecided`, role "undecided": `dyn plot` hatches points where they exceed 2%,
`dyn show` and `dyn run` list them).

The drift is the direct O(n^2) sum (`kernel = "direct"`), or the Fourier series in O(nK) within
`fourier_tol` (`"fourier"`); `"auto"` takes the series from FOURIER_FROM tokens on (faster there).

The file holds, drawn along beta on plots of the class shares: `beta_sync` = -0.16 (global
synchronization proved for beta >= -0.16, arXiv 2507.22857), `beta_no_sync` = -2/3 (below it
global synchronization fails: the equilateral triangle, and three equal clusters when 3 | n, are
stable), and `beta_three_clusters` = beta_3(n) (below it the 3-cluster equilibrium with sizes
as equal as possible is stable; :func:`dyn.attention.circle.three_cluster_onset`).
"""

from __future__ import annotations

import numpy as np

from ..core.contract import bytes_of
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import INTEGRATOR_KEYS, PROBABILITY, UNDECIDED, Chunk, Draw, Output, Reference, System, over_axes
from . import register

circle = lazy("dyn.attention.circle")

BETA_MAX = 50.0  # |beta| bound: every scaled weight e^{beta cos u - |beta|} >= e^{-100} is normal
DEFAULT_CAP_HORIZONS = 100  # horizon_cap when not given, in horizons
FOURIER_FROM = 16  # kernel = "auto": the O(nK) series from this many tokens on (measured faster)
CLASSES = ("synchronized", "equilibrium", "undecided")  # codes 1, 2, 0 of dyn.attention.circle
BETA_SYNC, BETA_NO_SYNC = -0.16, -2.0 / 3.0  # as in dyn.attention.circle (not imported: lazy)


@register
class AttentionCircle(System):
    name = "attention_circle"
    description = (
        "self-attention on the circle (angles, any beta): runs until synchronized or "
        "at a non-synchronized equilibrium; shares of each"
    )
    default_plot = "p_equilibrium"
    equation = "ode"
    integrator = INTEGRATOR_KEYS | {"horizon_cap"}
    params = {
        "n": Field("int", 32, "number of tokens n", lo=2, hi=10_000),
        "beta": Field("float", -0.5, "inverse temperature beta (< 0: repulsive attention)", lo=-BETA_MAX, hi=BETA_MAX),
        "normalization": Field(
            "str", "SA", "attention normalization (same equilibria and stability for both)", choices=("SA", "USA")
        ),
        "kernel": Field(
            "str",
            "auto",
            f"drift: direct O(n^2) sum, Fourier series O(nK), or auto (Fourier from n = {FOURIER_FROM})",
            choices=("auto", "direct", "fourier"),
        ),
        "fourier_tol": Field("float", 1e-12, "largest error of the Fourier drift", lo=1e-15, hi=1e-6),
        "sync_arc": Field(
            "float",
            0.1,
            "synchronized once every token lies in an arc shorter "
            "than this (radians; any value below pi decides: the arc then shrinks "
            "to a point)",
            gt=0.0,
            hi=3.0,
        ),
        "drift_tol": Field(
            "float",
            1e-6,
            "non-synchronized equilibrium once max_i |theta_i'| is "
            "below this, the run not synchronized and its linearization stable",
            gt=0.0,
            hi=1e-2,
        ),
    }

    def outputs(self, setup) -> list[Output]:
        outs = [
            Output(
                f"p_{c}",
                f"fraction of runs ending {DOC[c]}",
                "1",
                reduce="proportion",
                role=UNDECIDED if c == "undecided" else PROBABILITY,
            )
            for c in CLASSES
        ]
        return outs + [
            Output(
                "clusters_max",
                "most clusters (groups split by gaps wider than sync_arc) in a run's end state",
                "1",
                reduce="max",
            ),
            Output("decision_time", "time a run took to be decided (the cap if undecided; mean over runs)", "1"),
            Output("horizon_used", "longest time a run of this point took", "1", reduce="max"),
            Output("horizon_cap", "time at which an undecided run was stopped", "1", reduce="point"),
        ]

    def point_values(self, spec) -> dict:
        return {"horizon_cap": _cap(spec)}

    def run_bytes(self, spec) -> int:  # angles, the solver's stages and the classifier's copies
        return bytes_of(16, spec["n"])

    def simulate(self, spec, runs: range) -> Chunk:
        R, n = len(runs), spec["n"]
        theta = spec.rng.uniform(0.0, 2 * np.pi, (R, n, 1))
        p = _pack(spec)
        problem = circle.circle_problem(p)
        integ = spec.solver.get()
        cap = _cap(spec)
        codes = np.zeros(R, dtype=np.int64)
        status = np.zeros(R, dtype=np.int8)  # the integrator's, worst over the stretches
        times = np.full(R, cap)
        active = np.arange(R)
        t = 0.0
        while active.size and t < cap * (1 - 1e-12):
            stretch = min(spec.horizon, cap - t)
            solution = integ.solve(problem, theta[active], np.array([0.0, stretch]))
            theta[active] = solution.states[:, -1]
            status[active] = np.maximum(status[active], solution.status)
            t += stretch
            found = circle.classify(
                theta[active, :, 0], p, spec["beta"], spec["normalization"], spec["sync_arc"], spec["drift_tol"]
            )
            decided = found != circle.UNDECIDED
            codes[active[decided]] = found[decided]
            times[active[decided]] = t
            active = active[~decided]
        ends = theta[:, :, 0]
        values = {f"p_{c}": codes == getattr(circle, c.upper()) for c in CLASSES}
        values.update(
            clusters_max=circle.cluster_count(ends, spec["sync_arc"]).astype(float),
            decision_time=times,
            horizon_used=times,
        )
        return Chunk(values, finite=np.isfinite(ends).all(axis=1), status=status)

    def references(self, setup) -> list[Reference]:
        """The proved bounds -0.16 and -2/3 and the 3-cluster onset beta_3(n), along beta, one
        value per n (a line across the (beta, n) heat map; a vertical line on curves against
        beta)."""
        dims, cases = over_axes(setup, "n")
        shape = tuple(len(setup.axes[a]) for a in dims)
        onset = np.empty(shape)
        for index, v in cases:
            onset[index] = circle.three_cluster_onset(int(v["n"]))
        over = tuple(f"p_{c}" for c in CLASSES)
        return [
            Reference(
                "beta_sync",
                "synchronization proved for beta >= -0.16 (Polyanskiy, Rigollet, Yao 2025)",
                np.full(shape, BETA_SYNC),
                dims,
                draw=Draw(
                    over=over, along="beta", color="black", linestyle="--", label=r"sync proved: $\beta \geq -0.16$"
                ),
            ),
            Reference(
                "beta_no_sync",
                "global synchronization fails for beta < -2/3 (the equilateral triangle is stable)",
                np.full(shape, BETA_NO_SYNC),
                dims,
                draw=Draw(
                    over=over, along="beta", color="black", linestyle=":", label=r"no global sync: $\beta < -2/3$"
                ),
            ),
            Reference(
                "beta_three_clusters",
                "beta_3(n): the 3-cluster equilibrium with sizes as equal as possible is stable below (NaN: n < 3)",
                onset,
                dims,
                draw=Draw(
                    over=over,
                    along="beta",
                    color="tab:red",
                    linestyle="-",
                    label=r"3 clusters stable below $\beta_3(n)$",
                ),
            ),
        ]


DOC = {
    "synchronized": "synchronized (every token within an arc < sync_arc)",
    "equilibrium": "at a stable non-synchronized equilibrium (drift < drift_tol)",
    "undecided": "undecided at the cap",
}


def _cap(spec) -> float:
    """Time at which a run still undecided is stopped."""
    cap = spec.setup.horizon_cap
    return float(cap) if cap is not None else DEFAULT_CAP_HORIZONS * spec.horizon


def _pack(spec) -> np.ndarray:
    kernel = spec["kernel"]
    if kernel == "auto":
        kernel = "fourier" if spec["n"] >= FOURIER_FROM else "direct"
    return circle.pack_circle(spec["beta"], spec["normalization"], kernel, spec["fourier_tol"])
