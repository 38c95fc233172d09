"""Noisy attention: the attention flow of tokens on S^{d-1} with an independent Brownian motion
per token, its mean-field (McKean-Vlasov) limit and the phase transition of the uniform law
(physics.md §1.3).

- :mod:`.params`: the fields and the two flat vectors (direct drift, Fourier drift);
- :mod:`.sde`: the Ito SDE record with the direct O(n^2) attention drift (any d, Q, K, V);
- :mod:`.fourier`: the O(nK) drift on the circle (Q = K = V = I) and its SDE record;
- :mod:`.kernel`: Fourier / Funk-Hecke coefficients of e^{beta <x,y>} and their tail bounds
  (re-exported from :mod:`dyn.numerics.bessel`, which :mod:`dyn.attention` shares);
- :mod:`.theory`: linear growth rates around the uniform law (computed in
  :mod:`dyn.numerics.mode_rates`) and sigma_c(beta, d), derived;
- :mod:`.pde`: the mean-field equation on the circle (pseudo-spectral, ETDRK4);
- :mod:`.zonal`: the zonal mean field on S^{d-1} (Gegenbauer Galerkin, ETDRK4; the linearized
  operator; the stationary self-consistency);
- :mod:`.branches`: stationary branches for any d (pseudo-arclength through the fold), the fold
  sigma_fold(beta, d) and beta_*(d), derived; ``circle_branch`` and ``fold`` on the circle;
  ``clustered_r``, the stable clustered law's r at a given sigma / sigma_c;
- :mod:`.modes`: growth rates measured from the PDE and from particles;
- :mod:`.observables`, :mod:`.init`: order parameters, cluster counts, energy; initial laws.

Names load on first use (importing the package loads no kernel). The arrow between this package
and :mod:`dyn.attention` runs one way: noisy imports attention, never the reverse (what both
need lives in :mod:`dyn.numerics`).
"""

from ..core.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        ".params": (
            "DIRECT_MAX_N",
            "FIELDS",
            "FOURIER_LAYOUT",
            "LAYOUT",
            "attention_part",
            "fourier_order_of",
            "fourier_tolerance",
            "pack",
            "pack_fourier",
            "pack_values",
        ),
        ".sde": (
            "NOISY",
            "noise_shape",
            "noisy_diffusion",
            "noisy_diffusion_jax",
            "noisy_drift",
            "noisy_drift_jax",
            "noisy_problem",
        ),
        ".fourier": ("FOURIER", "circle_velocity", "fourier_drift", "fourier_drift_jax", "fourier_problem"),
        ".kernel": ("bessel_ratios", "circle_coefficients", "fourier_order", "funk_hecke", "mean_kernel", "tail_bound"),
        ".theory": ("drive", "growth_rates", "sigma_critical", "usa_circle_is_discontinuous"),
        ".pde": ("CircleMeanField", "min_grid", "perturbed_density", "phi_functions", "von_mises_density"),
        ".zonal": ("SelfConsistency", "ZonalMeanField", "gauss_nodes", "zonal_growth_rates", "zonal_polynomials"),
        ".branches": (
            "Branch",
            "bessel_beta_star",
            "beta_star",
            "branch",
            "branch_at",
            "branch_law",
            "circle_branch",
            "clustered_r",
            "fold",
            "landau_coefficient",
            "sigma_fold",
            "stationary_law",
        ),
        ".modes": ("particle_growth_rates", "pde_growth_rates", "windows"),
        ".observables": (
            "circle_clusters",
            "circle_modes",
            "circle_moments",
            "clusters",
            "interaction_energy",
            "order_parameter",
            "window_mean",
        ),
        ".init": ("LAWS", "cluster_tokens", "initial_tokens", "perturbed_circle", "uniform_tokens"),
    },
)
