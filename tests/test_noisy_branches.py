"""Stationary branches of noisy attention on S^{d-1} (dyn.noisy.branches): beta_*(d) from the
branch against the Bessel-ratio rule, the Landau coefficient against its derivation (USA and SA),
the change from supercritical to subcritical at beta_*, the fold, SA's continuous transition, the
circle values of the code this replaced, and the Dataset API."""

import math

import numpy as np
import pytest
from scipy.special import ive

from dyn import noisy


@pytest.mark.parametrize("d", [2, 3, 4, 8, 16])
def test_beta_star_from_the_branch_is_the_bessel_ratio_root(d):
    # the root in beta of the branch's measured curvature (sigma/sigma_c = 1 + A r^2 + ...)
    # against I_{d/2+1}(beta*) / I_{d/2}(beta*) = 1/d (Mun & Rosenzweig, 2606.05140)
    root = noisy.bessel_beta_star(d)
    assert abs(ive(d / 2 + 1, root) / ive(d / 2, root) - 1 / d) < 1e-15
    assert abs(noisy.beta_star(d) - root) < 1e-6
    assert noisy.beta_star(d, "SA") == math.inf


def test_beta_star_on_the_circle_is_the_engines_threshold():
    # d = 2: I_2/I_1 = 1/2 at 2.44692; dyn.noisy.theory's circle criterion switches there
    root = noisy.bessel_beta_star(2)
    assert abs(root - 2.446918) < 1e-6
    assert not noisy.usa_circle_is_discontinuous(root - 1e-6)
    assert noisy.usa_circle_is_discontinuous(root + 1e-6)
    # and beta_* decreases with d towards 1 ((d + 2)/d at leading order)
    stars = [noisy.bessel_beta_star(d) for d in (2, 3, 4, 8, 16, 64)]
    assert np.all(np.diff(stars) < 0) and 1 < stars[-1] < 1.05


@pytest.mark.parametrize("normalization", ["USA", "SA"])
def test_the_landau_coefficient_measured_on_the_branch_matches_its_derivation(normalization):
    # A = d C_3 / 2 from the third-order expansion (dyn/noisy/branches.py) against the fit of
    # the traced branch at r = 0.02..0.08; beta -> 0: A -> -d/(2(d+2)) for both normalizations
    for d in (2, 3, 8):
        for beta in (0.5, 2.0, 5.0):
            closed = noisy.landau_coefficient(beta, d, normalization)
            measured = noisy.landau_coefficient(beta, d, normalization, method="branch")
            assert abs(measured - closed) < 1e-8 * max(1.0, abs(closed)), (d, beta)
        small = noisy.landau_coefficient(1e-4, d, normalization)
        assert abs(small + d / (2 * (d + 2))) < 1e-4  # A = A(0) + O(beta)


@pytest.mark.parametrize("d", [2, 3, 8])
def test_supercritical_below_beta_star_and_subcritical_above(d):
    star = noisy.bessel_beta_star(d)
    for beta, sub in ((0.8 * star, False), (1.25 * star, True)):
        ds = noisy.branch(beta, d, r_max=0.6)
        sigma_c = ds.attrs["sigma_critical"]
        first = ds.sigma.values[1:4]  # the first traced points, r = 1e-3 ...
        assert np.all(first > sigma_c) == sub and np.all(first < sigma_c) == (not sub)
        assert (ds.attrs["landau_coefficient"] > 0) == sub
        assert bool(ds.stable.values[1]) == (not sub)  # subcritical: unstable near the uniform law
        fold = ds.attrs["sigma_fold"]
        if sub:
            assert fold > sigma_c * (1 + 1e-4)  # the hysteresis window sigma_c < sigma < fold
            assert fold == pytest.approx(ds.sigma.values.max(), rel=1e-15)
            assert fold == pytest.approx(noisy.sigma_fold(beta, d), rel=1e-13)
        else:
            assert math.isnan(fold) and math.isnan(noisy.sigma_fold(beta, d))
            assert np.all(np.diff(ds.sigma.values) < 0)


def test_the_fold_is_the_maximum_of_sigma_on_the_branch():
    # sigma along a dense r grid around the fold never exceeds sigma_fold, and comes within the
    # grid's (dr)^2 of it; the stability flag changes there
    beta, d = 4.0, 3
    fold = noisy.sigma_fold(beta, d)
    ds = noisy.branch(beta, d)
    i = int(np.argmax(ds.sigma.values))
    r = np.linspace(ds.r.values[i - 1], ds.r.values[i + 1], 41)
    dense = noisy.branch_at(beta, d, "USA", r)
    assert dense.sigma.max() <= fold * (1 + 1e-14)
    assert fold - dense.sigma.max() < 1e-6 * fold
    assert not dense.stable[0] and dense.stable[-1]
    # near beta_*: the window closes like (beta - beta_*)^2 (sigma_fold/sigma_c - 1 = -A^2/(4B))
    star = noisy.bessel_beta_star(d)
    gaps = [noisy.sigma_fold(star + e, d) / noisy.sigma_critical(star + e, d, "USA") - 1 for e in (0.02, 0.04)]
    assert 0 < gaps[0] < gaps[1] and 3.5 < gaps[1] / gaps[0] < 4.5


@pytest.mark.parametrize("d", [2, 3, 8])
def test_sa_is_always_supercritical(d):
    # SA: A < 0 for every beta (rho_2 < rho_1 < 1 in the derivation), and the whole traced branch
    # has sigma decreasing in r (stable), here up to beta = 20
    for beta in (0.5, 2.0, 8.0, 20.0, 60.0):
        assert noisy.landau_coefficient(beta, d, "SA") < 0
    ds = noisy.branch(20.0 if d < 8 else 8.0, d, "SA")
    assert np.all(np.diff(ds.sigma.values) < 0) and ds.stable.values.all()
    assert math.isnan(ds.attrs["sigma_fold"]) and ds.r.values[-1] == pytest.approx(0.97)


# Values of the circle-only code this module replaced (dyn/noisy/stationary.py before issue 22:
# natural continuation in r_1 on 60 points, r = 0.97 k/60, Newton with a trapezoid rule on 2048
# angles), recorded by calling it: circle_branch(beta, normalization).sigma[k] at these k, and
# fold(betas) (the vertex of a parabola through the 3 largest of 40 samples).
OLD_BRANCH = {
    (5.0, "USA"): {
        0: 3.1202954319091964,
        12: 3.1670567312886817,
        24: 3.247513141763795,
        36: 3.2938544370182146,
        37: 3.294211825485423,
        48: 3.2310111744649643,
        59: 2.683828238029052,
    },
    (2.0, "SA"): {
        0: 0.8352933554421058,
        12: 0.8290199827770615,
        24: 0.8088237264480819,
        36: 0.7623210033429885,
        59: 0.32199609511611965,
    },
    (1.0, "USA"): {0: 1.0631167302535813, 36: 0.9835397515406465, 59: 0.5138582157393743},
}
OLD_FIRST_STABLE = {(5.0, "USA"): 37, (2.0, "SA"): 0, (1.0, "USA"): 0}
# fold(5.0) with the old code: 40 samples (its default) and 800 samples (its parabola converged)
OLD_FOLD_5 = {40: 3.2942031198223622, 800: 3.294211854730312}
OLD_FOLD_GRID = {
    2.5173913043478264: 1.4253934460197693,
    3.1913043478260867: 1.7318902515791146,
    4.0: 2.2731177902887083,
}  # fold(np.linspace(2.45, 4.0, 24)) (noisy_phase)


def test_the_circle_reproduces_the_code_it_replaced():
    for (beta, normalization), values in OLD_BRANCH.items():
        branch = noisy.circle_branch(beta, normalization)
        assert len(branch.r) == 60
        np.testing.assert_allclose(branch.r, 0.97 * np.arange(1, 61) / 60, rtol=1e-15)
        for k, sigma in values.items():
            assert abs(branch.sigma[k] - sigma) < 1e-8 * sigma
        first = OLD_FIRST_STABLE[(beta, normalization)]
        assert not branch.stable[:first].any() and branch.stable[first:].all()
    # the fold is now exact (brentq on d sigma/dr): it agrees with the old parabola once that
    # converged (800 samples) to 1e-8, with its 40-sample default to its own error, 1e-5
    fold = noisy.fold([5.0])[0]
    assert abs(fold - OLD_FOLD_5[800]) < 1e-8 * fold
    assert abs(fold - OLD_FOLD_5[40]) < 1e-5 * fold
    got = noisy.fold(list(OLD_FOLD_GRID))
    np.testing.assert_allclose(got, list(OLD_FOLD_GRID.values()), rtol=1e-5)
    assert np.isnan(noisy.fold([2.0, 2.4])).all()  # supercritical: no fold


def test_the_dataset_and_its_validation():
    ds = noisy.branch(5.0, 2)
    assert ds.sigma.dims == ds.r.dims == ds.stable.dims == ("point",)
    assert ds.stable.dtype == bool
    for name in ("sigma", "r", "stable"):
        assert ds[name].attrs["long_name"] and "units" in ds[name].attrs
    assert (ds.attrs["beta"], ds.attrs["d"], ds.attrs["normalization"]) == (5.0, 2, "USA")
    sigma_c = noisy.sigma_critical(5.0, 2, "USA")
    assert ds.attrs["sigma_critical"] == pytest.approx(sigma_c, rel=1e-15)
    assert ds.r.values[0] == 0 and ds.sigma.values[0] == pytest.approx(sigma_c, rel=1e-15)
    assert np.all(np.diff(ds.r.values) > 0) and ds.r.values[-1] == pytest.approx(0.97)
    assert ds.attrs["sigma_fold"] in ds.sigma.values
    # the stationary law at a sigma of the branch has the branch's r
    i = int(np.argmin(np.abs(ds.r.values - 0.8)))
    law = noisy.stationary_law(5.0, float(ds.sigma.values[i]), 2, degree=64)
    assert law[0] == pytest.approx(1.0, abs=1e-14)
    assert law[1] / math.sqrt(2) == pytest.approx(ds.r.values[i], abs=1e-10)
    with pytest.raises(ValueError, match="no stable clustered law"):
        noisy.stationary_law(5.0, 1.01 * ds.attrs["sigma_fold"], 2)
    for bad in (
        {"d": 1},
        {"d": 2.5},
        {"d": True},
        {"beta": 0.0},
        {"beta": -1.0},
        {"beta": math.nan},
        {"normalization": "XA"},
    ):
        args = {"beta": 2.0, "d": 3, "normalization": "USA", **bad}
        with pytest.raises(ValueError):
            noisy.branch(**args)
        with pytest.raises(ValueError):
            noisy.sigma_fold(**args)
    for bad in (1, 0, 3.5):
        with pytest.raises(ValueError):
            noisy.beta_star(bad)
    with pytest.raises(ValueError):
        noisy.beta_star(3, "softmax")
