r"""Linear stability of the uniform law under the noisy attention flow (physics.md §1.3), for SA
and USA, Q = K = V = I, on any sphere S^{d-1}: growth rates and the critical noise sigma_c.

**The mean-field equation.** With rho a density with respect to the uniform probability measure
sigma on S^{d-1}, a(x, y) = e^{beta <x, y>}, N[rho](x) = int a(x, y) rho(y) sigma(dy),

    d_t rho = -div(rho v[rho]) + (sigma^2/2) Lap rho,
    v[rho](x) = P_x int a(x, y) y rho(y) sigma(dy) = (1/beta) grad N[rho](x) / D[rho](x),

where D = 1 (USA) or D = N[rho] (SA): P_x of the ambient gradient of e^{beta <x,y>}/beta is the
spherical gradient, so USA is v = grad Phi, Phi = N/beta, and SA is v = (1/beta) grad log N.

**Linearisation.** The uniform law rho_0 = 1 is stationary (N[1] = a_0 is constant, v = 0). Let
rho = 1 + eps Y_l with Y_l a spherical harmonic of degree l >= 1 (Lap Y_l = -l(l+d-2) Y_l).
Funk-Hecke (:mod:`.kernel`) gives N[rho] = a_0 + eps a_l Y_l, with
a_l(beta) = Gamma(d/2) (2/beta)^{d/2-1} I_{l+d/2-1}(beta). To first order in eps,
v = (eps a_l / (beta D_0)) grad Y_l with D_0 = 1 (USA) or a_0 (SA), and -div(rho_0 v) =
-(eps a_l / (beta D_0)) Lap Y_l. Hence Y_l grows at the rate

    USA:  lambda_l = l(l+d-2) [ a_l(beta)/beta - sigma^2/2 ]
                   = l(l+d-2) [ Gamma(d/2) 2^{d/2-1} beta^{-d/2} I_{l+d/2-1}(beta) - sigma^2/2 ],
    SA:   lambda_l = l(l+d-2) [ a_l(beta)/(beta a_0(beta)) - sigma^2/2 ]
                   = l(l+d-2) [ I_{l+d/2-1}(beta) / (beta I_{d/2-1}(beta)) - sigma^2/2 ].

Circle (d = 2, Y_k = e^{i k theta}, l(l+d-2) = k^2, a_k = I_k):

    USA:  lambda_k = k^2 ( I_k(beta)/beta - sigma^2/2 )          (physics.md §1.3)
    SA:   lambda_k = k^2 ( I_k(beta)/(beta I_0(beta)) - sigma^2/2 ).

The quadratic terms of the equation move a single mode k only into the modes 0 and 2k, so the
rate of mode k is exact to O(eps^2) relative. Limits: beta -> 0 gives a_1/beta -> 1/d for both
normalizations (the drift is P_x(mean of y)), so lambda_1 -> (d-1)(1/d - sigma^2/2).

**Where the uniform law loses stability.** For beta > 0 the orders satisfy I_{mu+1} < I_mu, so
a_l/beta decreases in l and mode l = 1 is the first to become unstable as sigma decreases (for
beta < 0, a_l changes sign with l and a_1/beta > 0 still holds). The uniform law is linearly
stable iff sigma > sigma_c, with

    USA:  sigma_c^2 = 2 a_1(beta)/beta  = 2 Gamma(d/2) (2/beta)^{d/2-1} I_{d/2}(beta) / beta
                    (circle: 2 I_1(beta)/beta; grows like e^{beta/2} beta^{-3/4}),
    SA:   sigma_c^2 = 2 I_{d/2}(beta) / (beta I_{d/2-1}(beta))
                    (circle: 2 I_1(beta)/(beta I_0(beta)); decreases from 2/d at beta = 0 to ~ 2/beta).

**Continuous or discontinuous (circle, USA).** Stationary laws solve rho ∝ exp(kappa N[rho]),
kappa = 2/(beta sigma^2). For rho even, rho ∝ exp(sum_k K_k r_k cos k theta) with
r_k = int cos(k theta) rho and K_k = 4 I_k/(beta sigma^2). Expanding the self-consistency to third
order in r_1 (r_2 = O(r_1^2)) gives r_1 = (K_1/2) r_1 + c_3 (K_1 r_1)^3 with
c_3 = -1/16 + K_2 / (32 - 16 K_2); at the threshold K_1 = 2, K_2 = 2 I_2/I_1. So the branch is
supercritical (continuous transition) iff I_2(beta)/I_1(beta) < 1/2, i.e. beta < 2.4469 (USA): for
larger beta a clustered law coexists with the stable uniform one above sigma_c (hysteresis). Any d
and SA, the branches themselves and their folds: :mod:`.branches`.

**Where the code lives.** The rates (:func:`drive`, :func:`growth_rates`) are computed in
:mod:`dyn.numerics.mode_rates`, the kernel's coefficients in :mod:`dyn.numerics.bessel`
(:mod:`dyn.attention` needs both), and re-exported here; sigma_c and the circle's criterion are
this module's.
"""

from __future__ import annotations

import math

import numpy as np

# the rates themselves live below dyn.noisy and dyn.attention (both use them); re-exported here
from ..numerics.mode_rates import drive, growth_rates

__all__ = ["drive", "growth_rates", "sigma_critical", "usa_circle_is_discontinuous"]


def sigma_critical(beta, d: int = 2, normalization: str = "USA"):
    """sigma_c(beta): the uniform law is linearly stable iff sigma > sigma_c (module doc).
    Accepts a scalar or an array of beta."""
    b = np.asarray(beta, dtype=float)
    out = np.array([math.sqrt(2.0 * float(drive(x, d, normalization, [1])[0])) for x in b.ravel()])
    return out.reshape(b.shape) if b.ndim else float(out[0])


def usa_circle_is_discontinuous(beta: float) -> bool:
    """True when the USA transition on the circle is discontinuous (I_2/I_1 > 1/2; module doc)."""
    from scipy.special import ive

    return bool(ive(2, abs(beta)) > 0.5 * ive(1, abs(beta)))
