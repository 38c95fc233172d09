r"""The attention kernel e^{beta <x, y>} in Fourier (circle) and Funk-Hecke (sphere) form, and
rigorous bounds on the tails of its expansion: re-exported from :mod:`dyn.numerics.bessel`,
where they live (and their mathematics is written) because :mod:`dyn.attention` needs them too
and must not import :mod:`dyn.noisy` (the arrow runs noisy -> attention only).
"""

from __future__ import annotations

from ..numerics.bessel import (
    CF_MARGIN,
    SCALED_FROM,
    bessel_ratios,
    circle_coefficients,
    fourier_order,
    funk_hecke,
    mean_kernel,
    mean_kernel_scaled,
    normalized_gains,
    tail_bound,
)

__all__ = [
    "CF_MARGIN",
    "SCALED_FROM",
    "bessel_ratios",
    "circle_coefficients",
    "fourier_order",
    "funk_hecke",
    "mean_kernel",
    "mean_kernel_scaled",
    "normalized_gains",
    "tail_bound",
]
