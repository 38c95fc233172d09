"""Tokens of a deep transformer at random initialization and their common-noise SDE limit
(physics.md §1.2, arXiv 2601.21942).

- :mod:`.params`: the parameters, declared once (fields, and the flat vector: beta, sigma, vbar,
  d, noise law, optional Vbar);
- :mod:`.transformer`: the discrete network (coupled increments, or exact sampling);
- :mod:`.sde`: the Ito SDE on the sphere (numba drift/diffusion for the generic SDE integrators,
  and JAX twins for diffrax);
- :mod:`.rho`: the exact two-token SDE, Lyapunov exponents, beta_c(d);
- :mod:`.fate`: the exact end-state probability (scale function) and the run-until-decided cap;
- :mod:`.classify`: end-state classes, census, Wilson intervals.

Names load on first use (importing the package loads no kernel).
"""

from ..core.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        ".classify": (
            "ANTIPODAL",
            "CLUSTER",
            "ONE_CLUSTER",
            "OTHER",
            "THRESHOLD",
            "TWO_ANTIPODAL",
            "UNDECIDED",
            "census",
            "classify_pair",
            "log_gaps",
            "wilson",
        ),
        ".transformer": ("network", "network_states"),
        ".lyapunov": ("ftle", "tangent_run", "tangent_space"),
        ".jax_batch": ("Q_LAYOUT", "network_problem", "pair_problem", "two_token_starts", "u_problem"),
        ".params": ("FIELDS", "LAYOUT", "NOISES", "effective_beta", "noise_law", "pack", "pack_values"),
        ".fate": ("RATE_FLOOR", "decision_cap", "exit_probability", "p_antipodal_exact"),
        ".rho": (
            "absorbing_levels",
            "beta_critical",
            "fixed_steps",
            "log_gaps_u",
            "lyapunov_minus",
            "lyapunov_plus",
            "rho_diffusion",
            "rho_drift",
            "rho_to_u",
            "sample_rho0",
            "two_token_u",
            "two_token_u_path",
            "u_thresholds",
        ),
        ".sde": (
            "TOKEN_SDE",
            "problem",
            "token_diffusion",
            "token_diffusion_jax",
            "token_drift",
            "token_drift_jax",
            "work_size",
        ),
    },
)
