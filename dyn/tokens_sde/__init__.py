"""Tokens of a deep transformer at random initialization and their common-noise SDE limit
(physics.md §1.2, arXiv 2601.21942).

- :mod:`.params`: the flat parameter vector (beta, sigma, vbar, d, noise law, optional Vbar);
- :mod:`.network`: the discrete network (coupled increments, or exact sampling);
- :mod:`.sde`: the Ito SDE on the sphere (numba drift/diffusion for the generic SDE integrators,
  and JAX twins for diffrax);
- :mod:`.rho`: the exact two-token SDE, Lyapunov exponents, beta_c(d);
- :mod:`.fate`: the exact end-state probability (scale function) and the run-until-decided cap;
- :mod:`.classify`: end-state classes, census, Wilson intervals.
"""
from .classify import (ANTIPODAL, CLUSTER, ONE_CLUSTER, OTHER, THRESHOLD, TWO_ANTIPODAL,
                       UNDECIDED, census, classify_pair, log_gaps, wilson)
from .network import network
from .params import NOISES, effective_beta, noise_law, pack
from .fate import RATE_FLOOR, decision_cap, exit_probability, p_antipodal_exact
from .rho import (absorbing_levels, beta_critical, fixed_steps, log_gaps_u, lyapunov_minus,
                  lyapunov_plus, rho_diffusion, rho_drift, rho_to_u, sample_rho0, two_token_u,
                  u_thresholds)
from .sde import problem, token_diffusion, token_diffusion_jax, token_drift, token_drift_jax

__all__ = [
    "ANTIPODAL", "CLUSTER", "ONE_CLUSTER", "OTHER", "THRESHOLD", "TWO_ANTIPODAL", "UNDECIDED",
    "RATE_FLOOR", "absorbing_levels", "beta_critical", "census", "classify_pair",
    "decision_cap", "effective_beta", "exit_probability", "fixed_steps", "p_antipodal_exact",
    "NOISES", "log_gaps", "log_gaps_u", "lyapunov_minus", "lyapunov_plus", "network",
    "noise_law", "pack", "problem",
    "rho_diffusion", "rho_drift", "rho_to_u", "sample_rho0", "token_diffusion",
    "token_diffusion_jax", "token_drift", "token_drift_jax", "two_token_u", "u_thresholds",
    "wilson",
]
