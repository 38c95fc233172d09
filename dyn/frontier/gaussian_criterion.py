r"""The two tests the gaussian_attention scenario is checked by, each with a known false-failure
rate (the derivations, the rates and their measurement: dyn/frontier/gaussian_attention.py,
The criterion).

The z's. Each point of the file (kind, d, n) and save time t carries a moment's mean over the
runs and its standard error, so z = (moment - reference) / se is a t statistic with runs - 1
degrees of freedom when the reference is the moment's expectation:

- cov_top, cov_bottom, cov_trace against their `*_finite_n` references (the moment ODE plus the
  derived O(1/n) bias);
- the mean by the paired difference `mean_paired` (each run less the moment ODE from its own
  initial empirical moments) against `mean_paired_finite_n` (the matched start's O(1/n) bias),
  for every kind whose mean moves. Sinkhorn conserves the mean (dm/dt = 0 and doubly
  stochastic weights), so its paired difference is not a fluctuation but the truncation of its
  Sinkhorn iterations (1e-9 to 1e-5 of |mu0| as the draw's kernel converges fast or slowly),
  checked deterministically (:func:`conserved_mean`); its unpaired z is the start's draw and
  nothing of the dynamics (the shipped seed's is a 1-in-300 draw at t = 0: chi-square
  p = 0.0034), so it is left out of both tests.

Family-wise (:func:`familywise`): all z's at t > 0, each two-sided against Student's t with
runs - 1 degrees of freedom; Holm's step-down rejects the hypotheses with p_(k) <=
alpha / (m - k + 1) in order; the test fails when Holm rejects any, which is the event
max |z| > t_{runs-1}^{-1}(1 - alpha / (2 m)) (Bonferroni's bound: 4.94 for the shipped file's
m = 550 at alpha = 0.05). Its false-failure rate is at most alpha whatever the dependence between the z's
(the union bound), and below alpha when they are correlated in time, as here.

Calibration (:func:`calibration`): per kind and moment, the z's of the independent (d, n)
points at the last save time, k of them. KS against t_{runs-1} (exact for k independent
draws), and the sum of squares of the normal scores u = Phi^{-1}(F_{runs-1}(z)), exactly
chi-square with k degrees of freedom (upper tail: a reference off by a bias or a standard error
off by a factor makes it large). The moment-matched form, (runs - 3)/(runs - 1) sum z^2 against
chi-square(k), has the right mean but not the right tail: t^2 has the larger variance, and at
the Bonferroni level of 24 tests (p < 0.05/24) its rate is 2.5 times the nominal one for k = 4
.. 10 (measured over 4e5 draws), so it is not used. The test fails when any of the
2 x (kind, moment) p-values (22 in the shipped file) is below alpha over their number (Bonferroni): false-failure
rate at most alpha.
"""

from __future__ import annotations

import numpy as np

COVARIANCES = ("cov_top", "cov_bottom", "cov_trace")


def z_scores(ds) -> dict:
    """{moment: z (kind, ..., time)} of a gaussian_attention file (module doc): the three
    covariance summaries against `*_finite_n`, the mean paired (unpaired for Sinkhorn)."""
    out = {k: (ds[k] - ds[f"{k}_finite_n"]) / ds[f"{k}_se"] for k in COVARIANCES}
    paired = (ds.mean_paired - ds.mean_paired_finite_n) / ds.mean_paired_se
    if "kind" in ds.dims:
        out["mean"] = paired.sel(kind=[k for k in ds.kind.values if k != "sinkhorn"])
    elif str(ds.kind.values) != "sinkhorn":
        out["mean"] = paired
    return out


def conserved_mean(ds) -> float:
    """The largest |paired mean difference| of the Sinkhorn points at t > 0 in standard errors
    of their mean (module doc): the truncation of the Sinkhorn iterations, zero for an exact
    doubly stochastic plan, and negligible beside the Monte Carlo error when far below 1."""
    later = dict(kind="sinkhorn")
    gap = np.abs(ds.mean_paired.sel(**later)) / ds.mean_along_se.sel(**later)
    return float(gap.isel(time=slice(1, None)).max())


def holm(p, alpha: float) -> np.ndarray:
    """Holm's step-down over the p-values p (flat): which hypotheses it rejects."""
    p = np.asarray(p, dtype=float).ravel()
    order = np.argsort(p)
    m = len(p)
    passed = p[order] <= alpha / (m - np.arange(m))
    stop = np.argmin(passed) if not passed.all() else m
    rejected = np.zeros(m, dtype=bool)
    rejected[order[:stop]] = True
    return rejected


def familywise(z: dict, runs: int, alpha: float = 0.05) -> dict:
    """Holm over every z at t > 0 with the t_{runs-1} tail: {'passed', 'largest', 'bound', 'm',
    'rejected': [(moment, index of the z, z)]}."""
    from scipy import stats

    names, values = [], []
    for k, v in z.items():
        later = v.isel(time=slice(1, None))
        names += [(k, i) for i in np.ndindex(*later.shape)]
        values.append(later.values.ravel())
    values = np.concatenate(values)
    if not np.isfinite(values).all():
        raise ValueError("family-wise test: a z is not finite (a standard error of zero?)")
    m = len(values)
    rejected = holm(2 * stats.t.sf(np.abs(values), runs - 1), alpha)
    bound = float(stats.t.isf(alpha / (2 * m), runs - 1))
    return {
        "passed": not rejected.any(),
        "largest": float(np.abs(values).max()),
        "bound": bound,
        "m": m,
        "rejected": [(names[i][0], names[i][1], float(values[i])) for i in np.flatnonzero(rejected)],
    }


def calibration(z: dict, runs: int, alpha: float = 0.05) -> dict:
    """Per kind and moment at the last save time: KS of the z's against t_{runs-1} and the
    chi-square of their normal scores, Bonferroni over all: {'passed', 'smallest', 'level',
    'p': {(kind, moment, test): p}}."""
    from scipy import stats

    found = {}
    for k, v in z.items():
        last = v.isel(time=-1)
        for kind in last.kind.values:
            points = np.asarray(last.sel(kind=kind).values, dtype=float).ravel()
            found[(str(kind), k, "ks")] = float(stats.kstest(points, "t", args=(runs - 1,)).pvalue)
            scores = stats.norm.isf(stats.t.sf(points, runs - 1))
            found[(str(kind), k, "chi2")] = float(stats.chi2.sf(np.sum(scores**2), len(points)))
    level = alpha / len(found)
    smallest = min(found.values())
    return {"passed": smallest > level, "smallest": smallest, "level": level, "p": found}


def runs_of(ds) -> int:
    """The number of runs per point of a file (its scenario's [ensemble] runs)."""
    import tomllib

    return int(tomllib.loads(ds.attrs["scenario"])["ensemble"]["runs"])
