"""Numerics shared by the models: the vectorised exp, and the attention mean field
m_i = sum_j A_ij V x_j (softmax or unnormalized weights) in numba and JAX."""
