"""The diffrax backend: adaptive and fixed-step ODE solvers (:mod:`.solvers`) and Euler-Maruyama
(:mod:`.sde`) over diffrax programs (:mod:`._programs`, which also sets JAX up: float64 and the
persistent compilation cache; the jax backend uses that setup too). Importing it imports no JAX."""
