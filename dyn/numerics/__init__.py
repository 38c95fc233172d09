"""Numerics shared by the models: the vectorised exp, and the attention mean field
m_i = sum_j A_ij V x_j (softmax or unnormalized weights) in numba and JAX; the Fourier /
Funk-Hecke (Bessel) coefficients of the kernel e^{beta <x,y>} and their tail bounds
(``bessel``), and the growth rates of the uniform law's modes (``mode_rates``), which
:mod:`dyn.attention` and :mod:`dyn.noisy` both use (here, so that noisy -> attention is the only
arrow between the two)."""
