r"""Gaussian-closed attention: a Gaussian law of tokens in R^d stays Gaussian, and its mean and
covariance solve a closed ODE (Castin, Ablin, Carrillo & Peyre, "A unified perspective on the
dynamics of deep Transformers", arXiv 2501.18322; the authors' code, 2025-transformers-PDEs,
integrates the covariance ODEs). Only the abstract and the public code could be read here, not
the paper's body: the derivation below is ours, checked against the code's right-hand sides
(with A = beta I its softmax and Sinkhorn covariance fields are those below without the -x
term; its L2 field is ours with Q = K = sqrt(beta) I, K^T K = beta I) and by the tests (quadrature, Monte Carlo,
the particles themselves). The abstract names five variants (multi-head, L2, Sinkhorn, sigmoid,
masked) for the mean-field limit of compactly supported data, and says of Gaussian data only that
"for different types of attention" the PDE preserves Gaussians; the public code integrates the
Gaussian covariance ODE of softmax, multi-head softmax, L2 and Sinkhorn, none for sigmoid or
masked. What the engine runs of each, and which keep Gaussians Gaussian, is below.

The particles. Tokens x_1 .. x_n in R^d, written with the public API as
``dyn.particles(phi, geometry="euclidean")``:

    dx_i/dt = sum_j A_ij (x_j - x_i),      A = N(w),   w_ij = phi(x_i, x_j),

- softmax: w = e^{beta <x_i, x_j>}, N "SA" (rows sum to 1);
- sinkhorn: the same w, N "sinkhorn" (doubly stochastic);
- l2: w = e^{-beta |x_i - x_j|^2} (``of="distance"``), N "SA";
- masked: w = e^{beta <x_i, x_j>} for j <= i, else 0 (``phi(s, i, j, beta)``), N "SA".

This is the attention flow with Q = K = sqrt(beta) I (A = K^T Q = beta I), values V = I and the
-x_i that the R^d builder subtracts (rows of A sum to 1: sum_j A_ij x_j - x_i).

The mean field. As n -> oo the empirical law tends to mu_t solving d/dt mu + div(mu v[mu]) = 0
with v[mu](x) = E_{y ~ pi(.|x)}[y] - x, pi(.|x) the row of the attention kernel. For mu = N(m, S):

- softmax: pi(dy|x) is mu tilted by e^{beta <x, y>}; the tilt of N(m, S) by e^{<a, y>} is
  N(m + S a, S) (complete the square), so E[y|x] = m + beta S x and

      v(x) = m + (beta S - I) x,                     affine;

- Sinkhorn: pi(dx, dy) = e^{beta <x, y> + f(x) + f(y)} mu(dx) mu(dy) with both marginals mu
  (the entropic optimal transport of mu to itself for the cost -<x, y> at temperature 1/beta;
  f = g by symmetry). f is quadratic (the Gaussian ansatz solves the Schroedinger system), so
  pi is Gaussian with covariance [[S, C], [C, S]], and the off-diagonal block of its precision
  is the coefficient -beta I of the cross term. Block inversion with C commuting with S (the
  ansatz, verified) gives S^{-1} C (S - C S^{-1} C)^{-1} = beta I, i.e. beta C^2 + C = beta S^2:

      C = (sqrt(I + 4 beta^2 S^2) - I) / (2 beta),   E[y|x] = m + C S^{-1} (x - m),
      v(x) = (C S^{-1} - I)(x - m),                  affine

  (the entropic Gaussian-to-Gaussian plan of Janati et al. / Mallasto et al. with equal
  covariances and epsilon = 1/beta).

- L2: pi(dy|x) is mu tilted by e^{-beta |x - y|^2} = e^{-beta |x|^2} e^{2 beta <x, y>}
  e^{-beta |y|^2}; the first factor cancels in the row's normalization, the others give the
  Gaussian of precision S^{-1} + 2 beta I, i.e. covariance S' = S (I + 2 beta S)^{-1}, and mean
  S' (S^{-1} m + 2 beta x); with S' S^{-1} = (I + 2 beta S)^{-1}:

      v(x) = (I + 2 beta S)^{-1} (m - x),            affine: a pull to the mean;

- masked (causal): in the mean-field limit a token at relative position tau in [0, 1] sees the
  law of the tokens at positions tau' <= tau (Castin et al.'s conditional framework: a law on
  [0, 1] x R^d). From i.i.d. tokens (the same N(m, S) at every position) every position sees
  N(m, S) itself, so it moves with softmax's velocity, every position alike, and stays alike:
  the masked flow from a position-independent Gaussian is softmax's, with softmax's moment ODE.
  What differs is finite n, and it is large (Finite n below);
- sigmoid: A_ij = sigma(beta <x_i, x_j>) / n (no normalization but the mean field's 1/n: "USA";
  the engine runs it). Its velocity E_y[sigma(beta <x, y>) (y - x)] is not affine in x: for
  m = 0, E[sigma(beta <x, y>)] = 1/2 by symmetry, and E[sigma(beta <x, y>) y] grows like
  beta S x / 4 near x = 0 but tends to E[y 1{<u, y> > 0}] = S u / sqrt(2 pi u^T S u) along
  x = a u, a -> oo (bounded; a test measures the curvature by quadrature). It does not push a
  Gaussian to a Gaussian, and there is no moment ODE to compare with: not a kind of this system.

An affine velocity v(x) = M x + b pushes a Gaussian to a Gaussian (x(t) is an affine image of
x(0)), with dm/dt = M m + b, dS/dt = M S + S M^T. Hence the moment ODEs:

    softmax, masked:  dm/dt = beta S m,    dS/dt = 2 beta S^2 - 2 S,
    Sinkhorn:         dm/dt = 0,           dS/dt = 2 C(S) - 2 S = (sqrt(I + 4 beta^2 S^2) - I)/beta - 2 S,
    L2:               dm/dt = 0,           dS/dt = -2 S (I + 2 beta S)^{-1}.

All keep S's eigenvectors; per eigenvalue lambda, softmax has the closed form
lambda(t) = 1 / (beta + (1/lambda0 - beta) e^{2t}) (collapse for lambda0 < 1/beta, blow-up in
finite time above) and the mean's component along that eigenvector grows by
e^t sqrt(lambda(t)/lambda0); Sinkhorn's lambda always decreases (sqrt(1 + 4 b^2 l^2) < 1 + 2 b l),
like -1/beta for large lambda and like -2 lambda for small; L2's lambda solves
d lambda/dt = -2 lambda / (1 + 2 beta lambda), log lambda + 2 beta lambda = log lambda0 +
2 beta lambda0 - 2t, lambda = W(2 beta lambda0 e^{2 beta lambda0 - 2t}) / (2 beta) with W the
Lambert function (always collapsing, like e^{-2t} once 2 beta lambda << 1, no blow-up).
:func:`moments` integrates the matrix ODEs (scipy solve_ivp, rtol 1e-11); tests check it
against the softmax and L2 closed forms.

The start: mu0 = mean0 (1, .., 1)/sqrt(d), S0 = diag(var0 aniso^{-k/(d-1)}), k = 0 .. d-1.
The outputs, per run, from the empirical mean and covariance (1/(n-1): unbiased at t = 0) of
the tokens at each save time, reduced over runs with their Monte Carlo standard errors:
`mean_along` (<m, u>, u = mu0/|mu0|), `cov_top` (S_11), `cov_bottom` (S_dd), `cov_trace`
(tr S / d), beside the moment ODE as references; `mean_error` = |m - m(t)| and `cov_error` =
|S - S(t)|_F, which shrink like n^{-1/2} (the fluctuations of the empirical law; the finite-n
bias is O(1/n)) down to the step error of the particles' integrator, `step_floor`: the moment
ODE integrated by RK4 at the scenario's step against solve_ivp.

Finite n. The n tokens are the mean-field flow of their own empirical law (j = i included), so
a moment's expectation over i.i.d. starts differs from the moment ODE by O(1/n) (the bias),
beside the O(n^{-1/2}) fluctuation. For softmax, to O(1/n):

(i) The drift of i.i.d. N(m, S) tokens. Given x_i = x, token i's velocity is a ratio of sums;
its expectation over the others is v(x) + b(x)/n with

    b(x) = h(x) (x - mu(x)) - g(x) beta S x,        mu(x) = m + beta S x,
    h(x) = e^{beta |x|^2} / Z(x),  Z(x) = e^{beta <x, m> + beta^2 x^T S x / 2},  g(x) = e^{beta^2 x^T S x}:

h is the token's weight on itself against the typical one (its attention that stays home), and
-g beta S x the ratio's delta-method term -E[w^2 (y - mu)]/Z^2 (w = e^{beta <x, y>}: the
normalizer's fluctuation). Over x ~ N(m, S) both are Gaussian integrals of e^{quadratic}, closed
by completing the square (finite while 2 beta^2 S^2 < I and beta S != I). So
n E[dm_n/dt] - n dm/dt = E_x b(x), and for S_n (1/(n-1)), with the cross terms of m_n with v_i
(the token itself, and every other token through the field: S/n each),
n E[dS_n/dt] - n dS/dt = -2 S + K + K^T, K = E_x[(x - m) b(x)^T] (:func:`finite_n_drift`; zero
at beta = 0, as it must be: there dm_n/dt = 0 and dS_n/dt = -2 S_n exactly). A test checks the
mean's part by Monte Carlo (beta = 0.4, n = 24). The covariance's part converges slowly: at
beta = 0.4, n E[bias] of S_11 is 0.23 at n = 16, 0.28 +- 0.01 at n = 64, against 0.32 (the
weights' higher moments, E w^k ~ e^{k^2 beta^2 x^T S x / 2}, make the next orders large).

The same for L2 (w = e^{-beta |x - y|^2}, bounded: w(x, x) = 1). With z = x - m,
P1 = (I + 2 beta S)^{-1}, P2 = (I + 4 beta S)^{-1}: Z(x) = det(P1)^{1/2} e^{-beta z^T P1 z},
x - mu(x) = P1 z, and E[w^2 (y - mu)] / Z^2 = -g(x) (P2 - P1) z with
g = det(I + 2 beta S) det(I + 4 beta S)^{-1/2} e^{2 beta z^T (P1 - P2) z}, so
b(x) = P1 z / Z(x) + g(x) (P2 - P1) z: odd in z, no bias of the mean (L2 is translation
invariant); each other token's pull on m_n is the tilted covariance S P1, and the token's own
is -S P1: they cancel, and n E[dS_n/dt] - n dS/dt = -2 S P1 + K + K^T, K = E[z b^T]. By Monte
Carlo (beta = 1, the test's S) n E[bias] of S_11 is 0.98, 1.04, 1.08 +- 0.025 at n = 32, 64,
128 against 1.19: converging, with a large next order again.

(ii) The moments' own spread. F (the softmax moment field) is quadratic, so
E F(X_n) = F(E X_n) + D^2F : Cov(X_n) / 2, X_n = (m_n, S_n) (L2's F = -(I - P1)/beta is not
quadratic: its D^2F at X(t) is 4 beta P1 dS P1 dS P1), with n Cov(X_n) = C(t) carried by
the linearized ODE, dC/dt = J C + C J^T, from the i.i.d. sample's (Cov m_n = S/n,
Cov S_n = (S (x) S)(I + swap)/(n - 1)). The part of (i) that this spread already explains at a
fresh sample, D^2F : C_iid / 2, is taken out of (i). Hence E X_n(t) = X(t) + delta(t)/n with

    d delta/dt = J delta + D^2F : C(t) / 2 + [finite_n_drift - D^2F : C_iid / 2](X(t))

(:func:`finite_n_moments`, softmax, L2 and Sinkhorn). Left out at O(1/n): the noise that the sample's non-Gaussian shape
feeds into the moments over time (it adds to C), and that a transported sample is not a fresh
one. Against 40000 runs of particles (d = 2, n = 64; numpy, the same RK4 step) and 4000 (d = 8,
n = 128), n x bias at t = 0.2 .. 1 (scenario law; measured +- standard error, then derived):
mean_along at d = 2: -0.18 -0.26 -0.28 -0.26 -0.20 (+- 0.03), -0.18 -0.27 -0.31 -0.31 -0.30;
cov_trace at d = 2: -0.02 0.02 0.07 0.11 0.12 (+- 0.01), -0.03 0.02 0.06 0.08 0.08;
cov_trace at d = 8: 0.21 0.32 0.35 0.33 0.28 (+- 0.02), 0.29 0.36 0.34 0.28 0.22;
cov_top at d = 8: 0.50 1.02 1.30 1.37 1.27 (+- 0.1), 1.05 1.40 1.40 1.22 0.98.
Right in size and shape; what is left is at most 0.55/n on S_11 and 0.08/n on cov_trace at
d = 8, 0.1/n on mean_along at d = 2: 0.4 standard errors of 20 runs at n = 128 or less, where
the bias against the moment ODE is up to 1.8 (cov_trace, d = 8). The scenario's
`*_finite_n` references are the moment ODE plus delta/n (softmax, L2, and Sinkhorn below);
the `*_ode` references are the n -> oo limit, the one
`mean_error` and `cov_error` (the n^{-1/2} slope) are measured from. In the shipped run L2's
correction takes d = 8, n = 256, cov_trace from 3.75 standard errors to 1.68 (n = 128: 2.5 to
0.39).

Masked attention at finite n: token i sees i + 1 tokens, so its self weight is a share of about
h/(i + 1) (token 0 never moves), and the self-weight argument alone gives a bias of moments over
all tokens of order sum_i 1/(i + 1) / n ~ log(n)/n, log n times softmax's. Measured (d = 8, 100
runs, t = 1), cov_trace's excess over the softmax ODE is 0.0134, 0.0083, 0.0049, 0.0037 at
n = 128, 256, 512, 1024 (standard errors 0.0008 to 0.0003): it shrinks, by 1.62, 1.68, 1.35 per
doubling, between log(n)/n (1.75 to 1.8) and n^{-1/2} (1.41); along the narrowest axis
(cov_bottom) n x excess / log n is constant (0.031 to 0.035), along the widest (cov_top) it
grows (1.25 to 2.44): the log(n)/n regime is not reached there by n = 1024, and its correction
is not derived. With 20 runs the covariance is 8.6 standard errors off at n = 128 (d = 8) and
4.8 at n = 512: the mean field holds but not within standard errors at these n, so masked is a
kind of the system, not of the shipped scenario. Tested: the engine's causal drift is softmax
over the past (token 0 fixed), and the excess is positive and shrinks (slow tier); the n -> oo
limit above is a derivation.

Why "within 3 standard errors at every saved time" is not a test: 30 points (3 kinds, 2 d, 5 n)
x 4 summaries x 5 times t > 0, 600 t statistics of 20 runs (t_19), P(|t_19| > 3) = 0.0074, so a
correct model has about 4 exceedances; correlated in time. With the
reference exact (40000 runs at d = 2, n = 64, cut into groups of 20 and compared with their own
grand mean), a point has some |z| > 3 with probability 0.05, so 20 points all pass with
probability about 0.36 (0.53 with 40 runs, 0.70 with 80), 30 points about 0.21. The failures
seen before this reference had a finite-n part (1 to 2 standard errors at d = 8,
n = 128 .. 256) but the worst were chance: at n = 512 and
1024, d = 2, the particles' mean along mu0 was already 2.87 and 1.85 standard errors off at
t = 0, where it is an exact average of i.i.d. draws, and the moment ODE run from each run's own
initial empirical moments is -2.7 and -3.2 standard errors off at t = 1 (the particles: -3.1
and -4.1 against `*_finite_n`). Generally, that ODE from each run's own start carries 85 to 97%
of the particles' run-to-run spread (its residual is 3 to 15% of their standard deviation at
d = 2, n = 64 and d = 8, n = 128).

Moment-matched starts (``start = "matched"``, a Monte Carlo variance reduction): the n draws
z_i ~ N(0, I) are moved to Lhat^{-1} (z_i - zbar), Lhat the Cholesky factor of their covariance
(1/(n - 1), as the summaries), then to mu0 + L0 z_i: every run starts with mean mu0 and
covariance Sigma0 exactly (needs n > d). For Gaussian draws this is the i.i.d. sample conditioned
on its moments: the standardized residuals are ancillary (x = mu + L z with L lower triangular
gives the same residuals as z) and (zbar, S_z) is complete sufficient, so by Basu's theorem they
are independent of it. Comparing each i.i.d. run with the moment ODE from its own initial moments
(the paired difference) has therefore, to leading order, the same residual spread. The finite-n
reference: the drift's bias given the moments is unchanged to leading order (the self weight and
the normalizer, finite_n_drift less the part D^2F : C_iid / 2 that the moments' spread explains),
and the moments' own spread starts at C(0) = 0 instead of C_iid (``finite_n_moments(..., start=
"matched")``); its growth from the shape's noise is left out as for i.i.d. starts.

Measured (400 runs, seed 99, n = 128 and 512, t = 0.2 .. 1, the scenario's law): the standard
errors shrink by 1.7 to 3.7 (softmax; cov_bottom 10 to 33), 6 to 7 (L2; cov_bottom 16 to 56), 17
to 62 (Sinkhorn's covariance; its mean is then conserved to rounding). That exposes what the
i.i.d. spread hid. The largest |particles - `*_finite_n`| over t > 0, in standard errors of 20
runs (the 400-run z over sqrt 20), i.i.d. then matched: softmax d = 2: 0.25, 0.77 (n = 128),
0.32, 0.60 (512); d = 8: 0.51, 4.2; 0.34, 1.1; L2 d = 2: 0.26, 0.69; 0.28, 0.78; d = 8: 0.36,
4.8; 0.24, 1.1; Sinkhorn d = 2: 0.40, 5.1; 0.32, 19 (the mean: a gap and a spread both at
rounding); d = 8: 1.3, 16; 0.58, 17. At d = 8, n = 128 the excess over the derived O(1/n) bias
falls like n^{-3/2} in standard errors (cov_trace: 16.2 to 2.1 at 400 runs, softmax; 21.6 to 3.1,
L2): the next order, O(1/n^2). Sinkhorn's O(1/n) bias (n x gap of cov_trace at d = 8 about
0.09 at t = 0.2, 0.10 at n = 512: steady) was not derived then: it is now (Sinkhorn at finite n,
below). And the error against the n -> oo ODE
is then no longer n^{-1/2}: the fluctuation left is comparable to the O(1/n) bias, so
cov_error's slope from n = 128 to 512 (mean over t > 0) is -0.30 and -0.40 (softmax, d = 2, 8),
-0.97, -0.87 (Sinkhorn), -0.50, -0.74 (L2), against -0.49 .. -0.55 from i.i.d. starts. The
shipped scenario run with start = "matched" (20 runs, its seed; 4.5 minutes on a loaded machine)
agrees: the largest z over t > 0 per n = 128 .. 2048 is 1.7 0.8 3.9 1.0 2.1 (softmax d = 2), 3.1
1.8 1.9 1.4 1.9 (d = 8), 1.4 2.0 3.7 1.1 2.4 (L2 d = 2), 7.0 2.2 1.7 4.2 1.4 (d = 8), 4.8 to 6.4
(Sinkhorn d = 2) and 12 to 24 (d = 8); cov_error's fitted slope (95% interval) is -0.46 (-0.86,
-0.07), -0.46 (-0.72, -0.20), -0.52 (-0.78, -0.26), -0.66 (-0.73, -0.59), -0.93 (-1.34, -0.52),
-0.94 (-1.07, -0.81). The paired difference (i.i.d. draws, each run less the moment ODE from its
own initial moments, against the matched reference; 400 runs, n = 128, 256) gives the same, as
Basu's theorem says: 0.76 0.49 (softmax d = 2), 3.5 1.7 (d = 8), 0.81 0.66 (L2 d = 2), 3.8 1.5
(d = 8), 3.3 3.9 (Sinkhorn d = 2), 14 15 (d = 8), in standard errors of 20 runs. Matched
starts make the check sharper than the references resolve, not passable: the scenario keeps
i.i.d. starts.

Sinkhorn at finite n. The n tokens' plan P = A/n is the doubly stochastic scaling of
k_ij = e^{beta <x_i, x_j>}: P_ij = b_i b_j kappa(x_i, x_j)/n^2 with kappa = e^{f(x) + f(y) +
beta <x, y>} the population plan's density against mu x mu (f its potential) and b_i
(1/n) sum_j kappa_ij b_j = 1. Columns sum to 1/n, so dm_n/dt = 0 exactly (no bias of the mean),
and dS_n/dt = 2 n/(n - 1) (T - m_n m_n^T) - 2 S_n, T = sum_ij P_ij x_i x_j^T. With mu = N(0, S),
S = diag(l) (the plan is translation invariant; rotate to S's eigenbasis), z = x/sqrt(l) and
rho_a = c_a/l_a (c = C(S)'s eigenvalues; rho/(1 - rho^2) = beta l is the cross term), kappa is
Mehler's kernel: kappa(x, y) = sum_alpha rho^alpha phi_alpha(z) phi_alpha(w), phi_alpha the
normalized Hermite products, so the operator K of kappa has eigenvalues rho^alpha. Write
mu_n = mu + nu (E[nu (x) nu] = (diag - mu (x) mu)/n: the atoms give the self term i = j) and
b = 1 + h1 + h2: the scaling equation (1 + h)(K(1 + h) + N(1 + h)) = 1, N the operator of nu,
gives (I + K) h1 = -N 1 and (I + K) h2 = -N h1 + h1^2, so h1 = -int l(., y) nu(dy) with
l = sum_alpha q_alpha phi_alpha phi_alpha, q_alpha = rho^alpha/(1 + rho^alpha). Expanding
T = int int kappa x y^T b(x) b(y) dmu_n dmu_n to second order in (nu, h1) and first in h2,
every expectation is a sum over multi-indices of q_alpha, q_alpha^2 and rho^alpha times
polynomials in alpha_a (z phi_m = sqrt(m + 1) phi_{m+1} + sqrt(m) phi_{m-1}). Per eigenvalue,
n (E T - C)_aa = l_a (1 + rho_a)/(1 - rho_a) prod_b 1/(1 - rho_b) - c_a        (i = j)
  + 2 l_a rho_a [2 (rho_a^2 Q1_a + Q21_a)/(1 + rho_a^2) + (Q0 + Q20)/2]            (E h2)
  - 2 l_a rho_a (2 Q1_a + Q0 + 1/2) + c_a                              (h1 at the atoms)
  - 2 l_a [rho_a (U1_a + U0 + 1/2) + U1_a/rho_a] + c_a                 (h1 against N y)
  + l_a [rho_a (V1_a + V0) + V1_a/rho_a]                                        (h1 h1),
with Q0, Q1_a = sum_{alpha != 0} (1, alpha_a) q_alpha, Q20, Q21_a the same of q_alpha^2, U of
q_alpha rho^alpha, V of q_alpha^2 rho^alpha: each a power series in rho^alpha summed in closed
form per power, sum_alpha rho^{k alpha} = prod_b 1/(1 - rho_b^k) (:func:`sinkhorn_plan_bias`;
the series against the direct sums over alpha in a test). Then n E[dS_n/dt] - n dS/dt =
2 (n (E T - C) - S + C) for i.i.d. tokens (E m_n m_n^T = S/n; n/(n - 1) adds C), the drift
bias the Finite n recursion takes, less the part the moments' own spread explains
(D^2F : C_iid / 2, F = 2 C(S) - 2 S, D^2C by Daleckii-Krein's second divided differences);
for matched starts the spread starts at zero. Checks: at beta -> 0 the bias of dS_n/dt given
the moments is -2 beta S^2 (K = 1 + beta <x_i, x_j>: b = 1, T = beta S^2 (1 - 1/n)^2 exactly),
the formula's limit; at t = 0 (matched tokens, d = 2, beta = 1, 2000 runs) n E[dS_n/dt] -
n dS/dt on the widest axis is 0.128, 0.183, 0.228, 0.243 (+- 0.01) at n = 64, 128, 256, 512
against 0.329 derived, on the narrowest 0.0148, 0.0166, 0.0171, 0.0183 (+- 0.0004) against
0.0192: the narrow axis converges, the wide one slowly. Why slowly: the self weight
kappa(x, x) = prod_a (1 - rho_a^2)^{-1/2} e^{rho_a z_a^2/(1 + rho_a)} has a finite second moment
only for rho < 1/3, so at rho = 0.414 (l = 0.5, beta = 1) the remainder is not O(1/n^2) but
about n^{-1-g}, g = (1 + rho)/(2 rho) - 1 = 0.71 (up to logarithms). Fitted a + b n^{-0.71}
(weighted), the wide axis extrapolates to 0.280 +- 0.011 (a + b/n: 0.257 +- 0.009): below 0.329,
not resolved at these n (open: the logarithms, or a missed term). At beta = 0.5 (rho = 0.236 <
1/3, no heavy tail) the wide axis gives -0.028, -0.0134, -0.0143 (+- 0.0045, 0.0027, 0.0046) at
n = 128, 256, 512, a + b/n extrapolating to -0.0048 +- 0.0050 against -0.0014 derived; the
narrow one 0.0040, 0.0040, 0.0042 (+- 0.0001) against 0.0042. Over time (particles, the
scenario's law, 400 runs, matched, d = 8), n x (cov_trace - ODE) at t = 0.2 .. 1 is 0.089 0.107
0.095 0.075 0.055 (n = 128), 0.099 0.118 0.105 0.083 0.061 (256), 0.104 0.123 0.108 0.084 0.062
(512; +- 0.002) against 0.112 0.125 0.107 0.082 0.059 derived; cov_top at n = 512 0.299 0.388
0.366 0.300 0.227 (+- 0.01) against 0.335 0.405 0.366 0.292 0.218. In standard errors of 20
runs the residual at t = 0.2 is -4.1, -2.2, -1.4 (cov_trace, n = 128, 256, 512: it falls about
like n^{-0.7}, the heavy tail's rate), at t >= 0.4 within 0.9 at n >= 256. Extrapolated with
that rate from n = 128 and 512, n x gap at t = 0.2 tends to 0.113 (cov_trace) and 0.329
(cov_top) against 0.112 and 0.335 derived. From i.i.d. starts
(400 runs, d = 8, n = 128) cov_trace's largest residual is 1.7 standard errors of 20 runs
against the ODE and 0.42 against the derived reference. So the matched check is not passable at
the scenario's n = 128 .. 256 by this reference (the next order is 2 to 4 standard errors at
t = 0.2), and with matched starts the moments' run-to-run spread is O(1/n), not O(n^{-1/2})
(n x standard error is flat in n above): no error is then n^{-1/2}, the issue's rate is a
property of the start's sampling. The scenario keeps i.i.d. starts, with all three kinds'
derived references.

The criterion (dyn/frontier/gaussian_criterion.py; the slow test runs it on the shipped file).
The z's: cov_top, cov_bottom and cov_trace against `*_finite_n` (the moment ODE plus the derived
O(1/n) bias, their expectation; against the n -> oo ODE the shipped file's covariance z's at
t = 1 have calibration p-values down to 0.018 (L2's cov_trace), not below the level: at t = 1
the bias is up to a standard error or two, visible, not decisive); the mean paired,
`mean_paired` = <m_n(t) - m_own(t), u> with m_own the moment ODE from the run's own initial
empirical moments, against `mean_paired_finite_n`. Why paired: the mean's
run-to-run spread is mostly the draw of its start (the ODE from each run's own start carries 85
to 97% of it, above), and a start 2 to 3 standard errors off (the shipped seed at d = 2, n = 512
and 1024: a 1-in-500 draw) stays so at every later time. Its reference: m_n(t) - m_own(t) is,
to leading order, a function of the standardized residuals of the start, which are independent
of its moments (Moment-matched starts, Basu), so its expectation is the matched start's O(1/n)
bias, finite_n_moments(..., start="matched") / n. The covariances stay unpaired: paired, they
expose the next order at d = 8 (3.5 to 15 standard errors, Moment-matched starts above).
Sinkhorn's mean is conserved (dm/dt = 0, columns summing to one), so its paired difference is
the truncation of the 10 Sinkhorn iterations (1e-9 to 1e-5 of |mu0|, as the draw's kernel
converges fast or slowly), not a fluctuation: it is checked as conserved (below 1% of the mean's
standard error; 1.6e-5 in the shipped file, at most 1.4e-3 over the seeds below). Its unpaired
z is the start's draw and nothing of the dynamics (the shipped seed's at t = 0: chi-square
p = 0.0034 over the 10 points), so it is in neither test: 550 z's, 11 (kind, moment) pairs.

- Family-wise: Holm over the 550 z's at t > 0 with the two-sided t_19 tail, alpha = 0.05; it
  rejects some hypothesis exactly when max |z| > t_19^{-1}(1 - alpha/1100) = 4.94. False-failure
  rate at most 0.05 whatever the dependence (the union bound); 1 - (1 - alpha/550)^550 = 0.049
  for independent z's, less for z's correlated in time as these. Shipped file: largest |z|
  2.94, passes.
- Calibration: per kind and moment (11 pairs), the z's at t = 1 of the 10 independent (d, n)
  points: KS against t_19 (exact for 10 independent draws) and sum u^2 of the normal scores
  u = Phi^{-1}(F_19(z)), exactly chi-square(10) (upper tail); Bonferroni over the 22 p-values at
  alpha = 0.05 (level 0.0023). False-failure rate at most 0.05 (0.049 for independent tests; a
  slow test measures the implementation's on 300 synthetic families of exact t_19 z's). Shipped
  file: smallest p 0.13 (softmax cov_top), passes. The scaled sum
  (17/19) sum z^2 against chi-square(10) has the right mean, not the right tail: at the level
  0.05/24 its rate is 2.5 times the nominal one (4e5 draws of t_19), so the normal scores replace
  it.

Both rates assume z ~ t_19 exactly: Gaussian run-to-run moments (at n >= 128 the per-run
moments are close to Gaussian) and a reference exact to well below a standard error (the
O(1/n^2) remainder above is 0.4 standard errors or less). Measured over seeds
(benchmarks/gaussian_criterion.py, seeds 1001 .. 1020, the scenario with n cut to 128 and 256,
where the O(1/n^2) remainder is largest; 220 z's, bound 4.53): each test failed 1 of 20 seeds,
at the nominal rate (1 expected at most), both on seed 1008, whose start at d = 8, n = 128 was
-3.44 standard errors off in cov_trace at t = 0 (an exact reference there: a 1-in-360 draw),
grown to -5.07 at t = 1 under softmax. The whole scenario (the same script without --n) over
seeds 1001 .. 1007 and the shipped seed: the family-wise test passed all 8 (largest |z| 4.77,
seed 1003: cov_bottom at d = 8, n = 512 already -4.75 at t = 0, the start's draw), the
calibration test failed 1 of 8 (seed 1006: softmax's paired mean, KS p = 4.7e-4, 9 of its 10
z's at t = 1 positive). Open: over these 7 seeds softmax's paired mean z at t = 1 averages
+0.36 (+- 0.12) standard errors, not shrinking with n (n <= 256 over the 20 seeds above: +0.11
+- 0.11), a hint of an O(1/n) term the matched start's bias leaves out of the paired
difference; 20 seeds of the whole scenario were not run here (about 4 minutes each on a quiet
core). At t = 0, where the reference is exact, 480 z's of these files have |z| > 3 in 1.7%
against t_19's 0.74% (correlated summaries; KS p = 0.05).

General Q, K, V. Softmax attention with queries Q, keys K and values V, dx_i/dt =
V sum_j A_ij x_j - c x_i, A_ij proportional to e^{<Q x_i, K x_j>}: the row at x tilts N(m, S)
by e^{<K^T Q x, y>}, to N(m + S K^T Q x, S), so v(x) = V m + M x with M = V S K^T Q - c I,
affine, and

    dm/dt = M m + V m,        dS/dt = M S + S M^T          (:func:`qkv_field`).

Q = K = sqrt(beta) I, V = I, c = 1 is softmax's moment ODE above. In the contracting case
Q = K = I, V = -I, c = 0 from m0 = 0: m stays 0 and dS/dt = -2 S^2, so S(t) = S0 (I + 2 t S0)^{-1}
(both tested). The particles with a general Q, K, V are not run here (below).

About the public API (what it could not say): one `dyn.particles` class has one normalization
and one kernel, so the four kinds are four built classes and :class:`GaussianAttention` is a
small `dyn.System` that hands each point to one of them by the parameter `kind`; the L2 kernel
is said with ``of="distance"`` and the mask with the positions (``phi(s, i, j, beta)``); the
self-interaction j = i cannot be left out (no option), which is where softmax's and masked
attention's finite-n bias comes from; the builder's initial law
(standard normal) and its cluster outputs (which build n x n distance matrices at every save)
are replaced by subclassing, and its cluster parameters (delta, until_decided, decide_cap) are
not used. A general Q, K, V (A not a multiple of I) is not a function of <x_i, x_j>: it would
need a `dyn.Model` with its own pair loop.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

import dyn

KINDS = ("softmax", "sinkhorn", "l2", "masked")
STARTS = ("iid", "matched")
MOMENTS = ("mean_along", "cov_top", "cov_bottom", "cov_trace")


def exp_score(s, beta):
    """phi(s) = e^{beta s}: the attention kernel of s = <x_i, x_j>."""
    return np.exp(beta * s)


def l2_score(s, beta):
    """phi(s) = e^{-beta s}: the L2 attention kernel of s = |x_i - x_j|^2."""
    return np.exp(-beta * s)


def causal_score(s, i, j, beta):
    """phi(s, i, j) = e^{beta s} for j <= i, else 0: causal (masked) attention, token i seeing
    the tokens before it and itself."""
    return np.exp(beta * s) if j <= i else 0.0


LAW = {
    "beta": dyn.Field("float", 1.0, "inverse temperature beta (A = beta I)", gt=0.0, hi=10.0),
    "mean0": dyn.Field("float", 1.0, "|mu0|: the start's mean is mean0 (1,..,1)/sqrt(d)", lo=-10.0, hi=10.0),
    "var0": dyn.Field("float", 0.5, "largest eigenvalue of the start's covariance Sigma0", gt=0.0, hi=10.0),
    "aniso": dyn.Field("float", 4.0, "ratio of Sigma0's largest to smallest eigenvalue", lo=1.0, hi=1e3),
}

Softmax = dyn.particles(
    exp_score,
    name="gaussian_softmax",
    geometry="euclidean",
    normalization="SA",
    params=LAW,
    description="softmax attention in R^d from a Gaussian start",
)
Sinkhorn = dyn.particles(
    exp_score,
    name="gaussian_sinkhorn",
    geometry="euclidean",
    normalization="sinkhorn",
    params=LAW,
    description="Sinkhorn attention in R^d from a Gaussian start",
)
L2 = dyn.particles(
    l2_score,
    name="gaussian_l2",
    geometry="euclidean",
    normalization="SA",
    params=LAW,
    of="distance",
    description="L2 attention in R^d from a Gaussian start",
)
Masked = dyn.particles(
    causal_score,
    name="gaussian_masked",
    geometry="euclidean",
    normalization="SA",
    params=LAW,
    description="causal softmax attention in R^d from a Gaussian start",
)


# --- the theory --------------------------------------------------------------------------------
def start(d: int, mean0: float, var0: float, aniso: float):
    """(mu0, Sigma0) of the start (module doc)."""
    mu = np.full(d, mean0 / np.sqrt(d))
    k = np.arange(d) / max(d - 1, 1)
    return mu, np.diag(var0 * aniso**-k)


def cross_covariance(beta: float, cov) -> np.ndarray:
    """C(S) = (sqrt(I + 4 beta^2 S^2) - I) / (2 beta), the cross-covariance of the entropic
    plan of N(m, S) to itself (written 2 beta l^2 / (1 + sqrt(1 + 4 beta^2 l^2)) per eigenvalue:
    no cancellation for small l)."""
    lam, vec = np.linalg.eigh((cov + cov.T) / 2)
    c = 2 * beta * lam**2 / (1 + np.sqrt(1 + 4 * beta**2 * lam**2))
    return (vec * c) @ vec.T


def l2_gain(beta: float, cov) -> np.ndarray:
    """(I + 2 beta S)^{-1}: L2 attention's pull towards the mean (module doc)."""
    return np.linalg.inv(np.eye(len(cov)) + 2 * beta * np.asarray(cov, dtype=float))


def velocity(kind: str, beta: float, mean, cov, x) -> np.ndarray:
    """The mean-field velocity v[N(mean, cov)](x) at points x (..., d) (module doc; masked
    attention from a position-independent start is softmax's)."""
    x = np.asarray(x, dtype=float)
    if kind in ("softmax", "masked"):
        return mean + x @ (beta * cov).T - x
    if kind == "l2":
        return (mean - x) @ l2_gain(beta, cov).T
    c = cross_covariance(beta, cov)
    gain = np.linalg.solve(cov, c).T  # C S^{-1} (both symmetric and commuting)
    return (x - mean) @ (gain - np.eye(len(mean))).T


def moment_field(kind: str, beta: float, mean, cov):
    """(dm/dt, dS/dt) of the moment ODE (module doc)."""
    if kind in ("softmax", "masked"):
        return beta * cov @ mean, 2 * beta * cov @ cov - 2 * cov
    if kind == "l2":
        pull = l2_gain(beta, cov) @ cov
        return np.zeros_like(mean), -pull - pull.T
    if kind == "sinkhorn":
        return np.zeros_like(mean), 2 * cross_covariance(beta, cov) - 2 * cov
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def qkv_field(q, k, v, c: float, mean, cov):
    """(dm/dt, dS/dt) of softmax attention with queries Q, keys K, values V and the pull -c x
    (module doc, General Q, K, V): m' = M m + V m, S' = M S + S M^T, M = V S K^T Q - c I."""
    q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
    cov = np.asarray(cov, dtype=float)
    gain = v @ cov @ k.T @ q - c * np.eye(len(cov))
    return gain @ mean + v @ mean, gain @ cov + cov @ gain.T


def moments_qkv(q, k, v, c: float, mean0, cov0, times, rtol: float = 1e-11):
    """The moment ODE of :func:`qkv_field` solved at `times` (from t = 0): means (T, d),
    covariances (T, d, d)."""
    d = len(mean0)

    def rhs(t, y):
        dm, ds = qkv_field(q, k, v, c, y[:d], y[d:].reshape(d, d))
        return np.concatenate([dm, ((ds + ds.T) / 2).ravel()])

    y0 = np.concatenate([np.asarray(mean0, float), np.asarray(cov0, float).ravel()])
    times = np.asarray(times, dtype=float)
    sol = solve_ivp(rhs, (0.0, float(times[-1])), y0, method="DOP853", t_eval=times, rtol=rtol, atol=rtol * 1e-2)
    if not sol.success:
        raise RuntimeError(f"moment ODE: {sol.message}")
    y = sol.y.T
    return y[:, :d], y[:, d:].reshape(-1, d, d)


def _flat_field(kind, beta, d):
    def rhs(t, y):
        dm, ds = moment_field(kind, beta, y[:d], y[d:].reshape(d, d))
        return np.concatenate([dm, ((ds + ds.T) / 2).ravel()])

    return rhs


def moments(kind: str, beta: float, mean0, cov0, times, rtol: float = 1e-11):
    """The moment ODE solved at `times` (from t = 0): means (T, d), covariances (T, d, d)."""
    d = len(mean0)
    y0 = np.concatenate([np.asarray(mean0, float), np.asarray(cov0, float).ravel()])
    times = np.asarray(times, dtype=float)
    sol = solve_ivp(
        _flat_field(kind, beta, d),
        (0.0, float(times[-1])),
        y0,
        method="DOP853",
        t_eval=times,
        rtol=rtol,
        atol=rtol * 1e-2,
    )
    if not sol.success:
        raise RuntimeError(f"moment ODE: {sol.message}")
    y = sol.y.T
    return y[:, :d], y[:, d:].reshape(-1, d, d)


def moments_rk4(kind: str, beta: float, mean0, cov0, times, dt: float):
    """The moment ODE by classical RK4 with step dt (the particles' method): its distance to
    :func:`moments` is the step error of the scheme at that step."""
    d = len(mean0)
    rhs = _flat_field(kind, beta, d)
    y = np.concatenate([np.asarray(mean0, float), np.asarray(cov0, float).ravel()])
    out, t = [y.copy()], 0.0
    for target in np.asarray(times, dtype=float)[1:]:
        steps = max(int(round((target - t) / dt)), 1)
        h = (target - t) / steps
        for _ in range(steps):
            k1 = rhs(t, y)
            k2 = rhs(t + h / 2, y + h / 2 * k1)
            k3 = rhs(t + h / 2, y + h / 2 * k2)
            k4 = rhs(t + h, y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            t += h
        out.append(y.copy())
    y = np.array(out)
    return y[:, :d], y[:, d:].reshape(-1, d, d)


def softmax_closed(beta: float, mean0, variances0, times):
    """Softmax's closed form for a diagonal Sigma0 = diag(variances0): (means, variances)."""
    lam0 = np.asarray(variances0, dtype=float)
    t = np.asarray(times, dtype=float)[:, None]
    lam = 1.0 / (beta + (1.0 / lam0 - beta) * np.exp(2 * t))
    return np.asarray(mean0) * np.exp(t) * np.sqrt(lam / lam0), lam


def l2_closed(beta: float, variances0, times):
    """L2's closed form for a diagonal Sigma0: each eigenvalue solves
    log l + 2 beta l = log l0 + 2 beta l0 - 2t, i.e. l = W(2 beta l0 e^{2 beta l0 - 2t})/(2 beta)
    (W the principal Lambert function)."""
    from scipy.special import lambertw

    lam0 = np.asarray(variances0, dtype=float)
    t = np.asarray(times, dtype=float)[:, None]
    arg = 2 * beta * lam0 * np.exp(2 * beta * lam0 - 2 * t)
    return lambertw(arg).real / (2 * beta)


def summaries(mean, cov, direction) -> dict:
    """The scalar moments the outputs carry, from means (..., d) and covariances (..., d, d)."""
    d = mean.shape[-1]
    return {
        "mean_along": mean @ direction,
        "cov_top": cov[..., 0, 0],
        "cov_bottom": cov[..., d - 1, d - 1],
        "cov_trace": np.trace(cov, axis1=-2, axis2=-1) / d,
    }


def _tilt(mean, cov, quad, lin):
    """For x ~ N(mean, cov) and f(x) = e^{x^T quad x + lin^T x}: E f, and the mean and covariance
    of the law f N(mean, cov) / E f (complete the square; needs cov^{-1} - 2 quad > 0)."""
    inv = np.linalg.inv(cov)
    precision = inv - 2 * quad
    tilted_cov = np.linalg.inv(precision)
    tilted_mean = tilted_cov @ (inv @ mean + lin)
    sign, logdet = np.linalg.slogdet(cov @ precision)
    if sign <= 0:
        raise ValueError("finite-n drift: the Gaussian integral diverges (2 beta^2 S^2 >= I, or beta S = I)")
    log_e = 0.5 * (tilted_mean @ precision @ tilted_mean - mean @ inv @ mean - logdet)
    return np.exp(log_e), tilted_mean, tilted_cov


FINITE_N_KINDS = ("softmax", "l2", "sinkhorn")  # the kinds whose finite-n bias is derived


def _self_plan_sums(rho):
    """Sums over multi-indices alpha != 0 of g(u) p(alpha_a), u = rho^alpha, for the four
    g = u/(1+u), u^2/(1+u)^2, u^2/(1+u), u^3/(1+u)^2 and p = 1, alpha_a (module doc, Finite n,
    Sinkhorn): each g is a power series in u (|u| <= max rho < 1 off alpha = 0), and
    sum_alpha rho^{k alpha} = prod_b 1/(1 - rho_b^k), sum_alpha alpha_a rho^{k alpha} =
    rho_a^k/(1 - rho_a^k) prod_b 1/(1 - rho_b^k). Returns {g: (p = 1 sums, p = alpha_a sums)}."""
    top = float(rho.max())
    if top <= 0.0:
        zero = np.zeros_like(rho)
        return {g: (0.0, zero) for g in ("q", "q2", "qu", "q2u")}
    terms = int(np.ceil(np.log(1e-17) / np.log(top))) + 10
    k = np.arange(1, terms + 1)
    power = rho[None, :] ** k[:, None]
    whole = np.prod(1.0 / (1.0 - power), axis=1)
    along = power / (1.0 - power) * whole[:, None]
    sign = (-1.0) ** k
    coefficients = {
        "q": -sign,
        "q2": np.where(k >= 2, sign * (k - 1), 0.0),
        "qu": np.where(k >= 2, sign, 0.0),
        "q2u": np.where(k >= 3, -sign * (k - 2), 0.0),
    }
    return {g: (c @ (whole - 1.0), c @ along) for g, c in coefficients.items()}


def sinkhorn_plan_bias(beta: float, variances) -> np.ndarray:
    """n (E[sum_ij P_ij x_i x_j^T] - C)_aa, to leading order, for n i.i.d. N(0, diag(variances))
    tokens and P their empirical self-plan (the doubly stochastic scaling of e^{beta <x_i, x_j>},
    divided by n): the self term, the potentials' fluctuation and their O(1/n) shift (module doc,
    Finite n, Sinkhorn). The plan is diagonal in the eigenbasis; entry a per variance."""
    lam = np.asarray(variances, dtype=float)
    c = 2 * beta * lam**2 / (1 + np.sqrt(1 + 4 * beta**2 * lam**2))
    rho = c / lam
    if np.prod(1.0 / (1.0 - rho)) > 1e8:  # the alternating series would lose every digit
        return np.full_like(lam, np.nan)
    sums = _self_plan_sums(rho)
    q0, q1 = sums["q"]
    q20, q21 = sums["q2"]
    qu0, qu1 = sums["qu"]
    q2u0, q2u1 = sums["q2u"]
    by_rho = np.divide(1.0, rho, out=np.zeros_like(rho), where=rho > 0)
    diagonal = lam * (1 + rho) / (1 - rho) * np.prod(1.0 / (1.0 - rho)) - c  # i = j
    shift = lam * rho * (2 * (rho**2 * q1 + q21) / (1 + rho**2) + (q0 + q20) / 2)  # E h2
    at_atoms = -lam * rho * (2 * q1 + q0 + 0.5) + c / 2  # h1 at the sample's own points
    field = -lam * (rho * (qu1 + qu0 + 0.5) + qu1 * by_rho) + c / 2  # h1 against nu's field
    pairs = lam * (rho * (q2u1 + q2u0) + q2u1 * by_rho)  # h1(x) h1(y)
    return diagonal + 2 * (shift + at_atoms + field) + pairs


def _cross_differences(beta, lam):
    """First (d, d) and second (d, d, d) divided differences of c(l) = (sqrt(1 + 4 beta^2 l^2)
    - 1)/(2 beta) at the eigenvalues (Daleckii-Krein: the derivatives of C(S))."""
    root = np.sqrt(1 + 4 * beta**2 * lam**2)
    f = 2 * beta * lam**2 / (1 + root)
    f1 = 2 * beta * lam / root
    f2 = 2 * beta / root**3
    gap = lam[:, None] - lam[None, :]
    close = np.abs(gap) <= 1e-6 * np.maximum(lam[:, None], lam[None, :])
    mid = (f1[:, None] + f1[None, :]) / 2
    first = np.where(close, mid, (f[:, None] - f[None, :]) / np.where(close, 1.0, gap))
    # f[l_i, l_k, l_j] = (f[l_i, l_k] - f[l_k, l_j]) / (l_i - l_j)
    num = first[:, :, None] - first[None, :, :]
    den = gap[:, None, :]
    near = np.abs(den) <= 1e-6 * np.maximum(lam[:, None, None], lam[None, None, :])
    # equal ends: d/dl f[l, l_k] at l = l_i (and f''/2 when all three meet)
    lk = lam[None, :, None]
    li = lam[:, None, None]
    gap_k = li - lk
    meet = np.abs(gap_k) <= 1e-6 * np.maximum(li, lk)
    slope = np.where(
        meet,
        (f2[:, None, None] + f2[None, :, None]) / 4,
        (f1[:, None, None] - first[:, :, None]) / np.where(meet, 1.0, gap_k),
    )
    second = np.where(near, slope, num / np.where(near, 1.0, den))
    return first, second


def finite_n_drift(kind: str, beta: float, mean, cov):
    """n times the O(1/n) bias of the n-token moment drift of softmax, L2 or Sinkhorn attention,
    tokens i.i.d. N(mean, cov): (n E[dm_n/dt] - n dm/dt, n E[dS_n/dt] - n dS/dt) to leading order
    (module doc, Finite n)."""
    mean, cov = np.asarray(mean, dtype=float), np.asarray(cov, dtype=float)
    d = len(mean)
    eye = np.eye(d)
    if kind == "sinkhorn":  # doubly stochastic: dm_n/dt = 0 exactly
        lam, vec = np.linalg.eigh((cov + cov.T) / 2)
        cross = 2 * beta * lam**2 / (1 + np.sqrt(1 + 4 * beta**2 * lam**2))
        # dS_n/dt = 2 n/(n - 1) (T - m_n m_n^T) - 2 S_n: E m_n m_n^T = S/n, n/(n - 1) adds C/n
        bias = 2 * (sinkhorn_plan_bias(beta, lam) - lam + cross)
        return np.zeros(d), (vec * bias) @ vec.T
    if kind == "l2":
        near, nearer = l2_gain(beta, cov), l2_gain(2 * beta, cov)
        # self weight 1/Z = det(I + 2 beta S)^{1/2} e^{beta z^T P1 z}; the normalizer's spread
        # E[w^2]/Z^2 = det(I + 2 beta S) det(I + 4 beta S)^{-1/2} e^{2 beta z^T (P1 - P2) z}
        e_h, _, c_h = _tilt(np.zeros(d), cov, beta * near, np.zeros(d))
        e_g, _, c_g = _tilt(np.zeros(d), cov, 2 * beta * (near - nearer), np.zeros(d))
        e_h *= np.sqrt(np.linalg.det(eye + 2 * beta * cov))
        e_g *= np.linalg.det(eye + 2 * beta * cov) / np.sqrt(np.linalg.det(eye + 4 * beta * cov))
        k = e_h * c_h @ near + e_g * c_g @ (nearer - near)
        return np.zeros(d), -near @ cov - cov @ near + k + k.T
    if kind != "softmax":
        raise ValueError(f"finite-n drift: kind must be one of {FINITE_N_KINDS}, got {kind!r}")
    e_h, m_h, c_h = _tilt(mean, cov, beta * eye - beta**2 * cov / 2, -beta * mean)  # self
    e_g, m_g, c_g = _tilt(mean, cov, beta**2 * cov, np.zeros(d))  # the normalizer's spread
    drift_m = e_h * ((eye - beta * cov) @ m_h - mean) - e_g * beta * cov @ m_g
    outer_h = c_h + np.outer(m_h - mean, m_h)  # E_h[(x - m) x^T]
    outer_g = c_g + np.outer(m_g - mean, m_g)
    k = e_h * (outer_h @ (eye - beta * cov) - np.outer(m_h - mean, mean)) - e_g * outer_g @ (beta * cov)
    return drift_m, -2 * cov + k + k.T


def _tangent(kind, beta, mean, cov, dm, ds):
    """The moment ODE's derivative at (mean, cov) along (dm, ds) (batched over a last axis)."""
    if kind == "sinkhorn":  # dS/dt = 2 C(S) - 2 S, DC by Daleckii-Krein in S's eigenbasis
        lam, vec = np.linalg.eigh((cov + cov.T) / 2)
        first, _ = _cross_differences(beta, lam)
        rotated = np.einsum("ai,ab...,bj->ij...", vec, ds, vec)
        dc = np.einsum("ai,ij...,bj->ab...", vec, first.reshape(first.shape + (1,) * (ds.ndim - 2)) * rotated, vec)
        return np.zeros_like(dm), 2 * dc - 2 * ds
    if kind == "l2":  # dS/dt = -(I - P)/beta, P = (I + 2 beta S)^{-1}: dP = -2 beta P dS P
        pull = l2_gain(beta, cov)
        return np.zeros_like(dm), -2 * np.einsum("ab,bc...,cd->ad...", pull, ds, pull)
    tm = beta * (np.einsum("ab...,b->a...", ds, mean) + np.einsum("ab,b...->a...", cov, dm))
    ts = 2 * beta * (np.einsum("ab...,bc->ac...", ds, cov) + np.einsum("ab,bc...->ac...", cov, ds)) - 2 * ds
    return tm, ts


def _curvature(kind, beta, cov, spread):
    """E[D^2F [dX, dX]] / 2 when n Cov(dX) = spread ((d + d^2) square: m, then S row-major)."""
    d = len(cov)
    pairs = spread[d:, d:].reshape(d, d, d, d)  # E[dS_ab dS_cd]
    if kind == "sinkhorn":  # D^2F/2 = D^2C: 2 sum_k c[l_i, l_k, l_j] dS_ik dS_kj, eigenbasis
        lam, vec = np.linalg.eigh((cov + cov.T) / 2)
        _, second = _cross_differences(beta, lam)
        rotated = np.einsum("ai,bk,ck,dj,abcd->ikj", vec, vec, vec, vec, pairs, optimize=True)
        part = 2 * np.einsum("ikj,ikj->ij", second, rotated)
        return np.concatenate([np.zeros(d), (vec @ part @ vec.T).ravel()])
    if kind == "l2":  # the second order of -(I - P)/beta: 4 beta P dS P dS P
        pull = l2_gain(beta, cov)
        cov_part = 4 * beta * np.einsum("ab,cd,ef,bcde->af", pull, pull, pull, pairs)
        return np.concatenate([np.zeros(d), cov_part.ravel()])
    mean_part = beta * np.einsum("bab->a", spread[:d, d:].reshape(d, d, d))
    cov_part = 2 * beta * np.einsum("abbc->ac", pairs)
    return np.concatenate([mean_part, cov_part.ravel()])


def finite_n_moments(kind: str, beta: float, mean0, cov0, times, rtol: float = 1e-9, start: str = "iid"):
    """n times the O(1/n) bias of softmax's, L2's or Sinkhorn's n-token empirical moments against
    the moment ODE at `times` (module doc, Finite n): (n dm (T, d), n dS (T, d, d));
    E[m_n(t)] ~ m(t) + dm/n. `start` "iid": i.i.d. tokens; "matched": their moment-matched transform (the moments'
    own spread starts at zero)."""
    if kind not in FINITE_N_KINDS:
        raise ValueError(f"finite-n moments: kind must be one of {FINITE_N_KINDS}, got {kind!r}")
    if start not in STARTS:
        raise ValueError(f"finite-n moments: start must be one of {STARTS}, got {start!r}")
    mean0, cov0 = np.asarray(mean0, dtype=float), np.asarray(cov0, dtype=float)
    d = len(mean0)
    size = d + d * d

    def unpack(y):
        m, s = y[:d], y[d:size].reshape(d, d)
        spread = y[size : size + size * size].reshape(size, size)
        return m, s, spread, y[size + size * size :]

    def iid_spread(cov):  # n Cov of an i.i.d. sample's (m_n, S_n), n -> oo
        out = np.zeros((size, size))
        out[:d, :d] = cov
        out[d:, d:] = (np.einsum("ac,bd->abcd", cov, cov) + np.einsum("ad,bc->abcd", cov, cov)).reshape(d * d, d * d)
        return out

    def tangent(m, s, dx):  # dx (size, ...) -> J dx
        tm, ts = _tangent(kind, beta, m, s, dx[:d], dx[d:].reshape((d, d) + dx.shape[1:]))
        return np.concatenate([tm, ts.reshape((d * d,) + dx.shape[1:])])

    def rhs(t, y):
        m, s, spread, bias = unpack(y)
        dm, ds = moment_field(kind, beta, m, s)
        js = tangent(m, s, spread)
        bm, bs = finite_n_drift(kind, beta, m, s)
        # the drift bias of i.i.d. tokens, less the part the moments' own spread explains
        source = np.concatenate([bm, bs.ravel()]) - _curvature(kind, beta, s, iid_spread(s))
        return np.concatenate(
            [dm, ds.ravel(), (js + js.T).ravel(), tangent(m, s, bias) + _curvature(kind, beta, s, spread) + source]
        )

    spread0 = iid_spread(cov0) if start == "iid" else np.zeros((size, size))
    y0 = np.concatenate([mean0, cov0.ravel(), spread0.ravel(), np.zeros(size)])
    times = np.asarray(times, dtype=float)
    sol = solve_ivp(rhs, (0.0, float(times[-1])), y0, method="DOP853", t_eval=times, rtol=rtol, atol=rtol * 1e-2)
    if not sol.success:
        raise RuntimeError(f"finite-n moments: {sol.message}")
    bias = sol.y[size + size * size :].T
    return bias[:, :d], bias[:, d:].reshape(-1, d, d)


def n_slope(ns, errors, ses=None):
    """Least-squares slope of log(error) against log(n), and its 95% interval (t quantile of the
    residual scatter; with standard errors `ses`, weighted by their relative size)."""
    from scipy import stats

    x, y = np.log(np.asarray(ns, float)), np.log(np.asarray(errors, float))
    w = np.ones_like(x) if ses is None else (np.asarray(errors) / np.asarray(ses)) ** 2
    xm, ym = np.average(x, weights=w), np.average(y, weights=w)
    sxx = np.sum(w * (x - xm) ** 2)
    slope = np.sum(w * (x - xm) * (y - ym)) / sxx
    resid = y - ym - slope * (x - xm)
    dof = max(len(x) - 2, 1)
    se = np.sqrt(np.sum(w * resid**2) / dof / sxx)
    half = stats.t.ppf(0.975, dof) * se
    return float(slope), (float(slope - half), float(slope + half))


# --- the particles -----------------------------------------------------------------------------
def matched(z) -> np.ndarray:
    """Samples z (runs, n, d) transformed affinely so that each run's empirical mean is 0 and
    its empirical covariance (1/(n - 1), as the summaries) is I: z -> Lhat^{-1} (z - zbar), Lhat
    the Cholesky factor of the sample's covariance (needs n > d). Of i.i.d. Gaussian draws this is
    the sample conditioned on its mean and covariance (module doc, Moment-matched starts)."""
    from scipy.linalg import solve_triangular

    z = np.asarray(z, dtype=float)
    centred = z - z.mean(axis=1, keepdims=True)
    cov = np.einsum("ria,rib->rab", centred, centred) / (z.shape[1] - 1)
    out = np.empty_like(centred)
    for r, c in enumerate(np.linalg.cholesky(cov)):
        out[r] = solve_triangular(c, centred[r].T, lower=True).T
    return out


class GaussianTokens:
    """What the Gaussian scenario changes in a built particles class: the start N(mu0, Sigma0),
    the moment outputs (no cluster statistics), no run-until-decided."""

    def initial_state(self, spec, runs: int) -> np.ndarray:
        mu, cov = start(spec["d"], spec["mean0"], spec["var0"], spec["aniso"])
        z = spec.rng.standard_normal((runs, spec["n"], spec["d"]))
        if spec.values.get("start", "iid") == "matched":
            z = matched(z)
        return mu + z * np.sqrt(np.diag(cov))  # Sigma0 diagonal: L0 = sqrt(Sigma0)

    def validate(self, spec) -> None:
        dyn.Model.validate(self, spec)

    def simulate(self, spec, runs: range):
        return dyn.Model.simulate(self, spec, runs)

    def run_bytes(self, spec) -> int:
        n, d = spec["n"], spec["d"]
        return 8 * (n * n + 3 * len(spec.times) * n * d)

    def trajectory_dims(self, setup):
        return None

    def observe(self, spec, states) -> dyn.Chunk:
        x = np.asarray(states)  # (runs, T, n, d)
        n = x.shape[2]
        mean = x.mean(axis=2)
        centred = x - mean[:, :, None, :]
        cov = np.einsum("rtia,rtib->rtab", centred, centred) / max(n - 1, 1)
        mu0, cov0 = start(spec["d"], spec["mean0"], spec["var0"], spec["aniso"])
        m, s = moments(spec["kind"], spec["beta"], mu0, cov0, spec.times)
        values = summaries(mean, cov, _direction(mu0))
        values["mean_error"] = np.linalg.norm(mean - m, axis=-1)
        values["cov_error"] = np.linalg.norm(cov - s, axis=(-2, -1))
        values["mean_paired"] = paired_mean(spec["kind"], spec["beta"], mean, cov, spec.times, _direction(mu0))
        # a run diverges when its tokens do (mean_paired's NaN: its own moment ODE did)
        return dyn.Chunk(values, finite=np.isfinite(x).reshape(len(x), -1).all(axis=1))


class SoftmaxTokens(GaussianTokens, Softmax):
    """Softmax attention tokens from a Gaussian start."""


class SinkhornTokens(GaussianTokens, Sinkhorn):
    """Sinkhorn attention tokens from a Gaussian start."""


class L2Tokens(GaussianTokens, L2):
    """L2 attention tokens from a Gaussian start."""


class MaskedTokens(GaussianTokens, Masked):
    """Causal softmax attention tokens from a Gaussian start."""


TOKENS = {"softmax": SoftmaxTokens, "sinkhorn": SinkhornTokens, "l2": L2Tokens, "masked": MaskedTokens}


def paired_mean(kind: str, beta: float, mean, cov, times, direction) -> np.ndarray:
    """<m_n(t) - m_own(t), u> per run, m_own the moment ODE started from the run's own empirical
    moments at t = 0 (mean (runs, T, d), cov (runs, T, d, d)): the paired difference, whose
    expectation is the matched start's O(1/n) bias (module doc, The criterion). NaN for a run
    whose own moment ODE does not reach the horizon (softmax from an empirical eigenvalue above
    1/beta blows up in finite time: few tokens)."""
    out = np.empty(mean.shape[:2])
    for r in range(mean.shape[0]):
        try:
            own, _ = moments(kind, beta, mean[r, 0], cov[r, 0], times)
        except RuntimeError:
            out[r] = np.nan
            continue
        out[r] = (mean[r] - own) @ direction
    return out


def _direction(mu0):
    norm = np.linalg.norm(mu0)
    return mu0 / norm if norm > 0 else np.eye(len(mu0))[0]


_LABELS = {
    "mean_along": "<m, u>, u = mu0/|mu0|: the empirical mean along the start's",
    "cov_top": "Sigma_11: the empirical variance along the start's widest axis",
    "cov_bottom": "Sigma_dd: the empirical variance along the start's narrowest axis",
    "cov_trace": "tr Sigma / d: the empirical covariance's mean eigenvalue",
}


class GaussianAttention(dyn.System):
    """Softmax, Sinkhorn, L2 or causal attention in R^d from N(mu0, Sigma0), against the
    moment ODE."""

    name = "gaussian_attention"
    description = (
        "attention in R^d from a Gaussian start: empirical mean and covariance "
        "against the closed moment ODE (softmax, Sinkhorn, L2, masked)"
    )
    default_plot = "cov_trace"
    params = {
        "kind": dyn.Field(
            "str",
            "softmax",
            "attention: softmax (rows sum to 1), "
            "sinkhorn (doubly stochastic), l2 (softmax of -beta |x_i - "
            "x_j|^2) or masked (causal softmax: j <= i)",
            choices=KINDS,
        ),
        **LAW,
        "n": dyn.Field("int", 256, "number of tokens", lo=2, hi=4096),
        "d": dyn.Field("int", 2, "dimension of the space", lo=1, hi=32),
        "start": dyn.Field(
            "str",
            "iid",
            "the tokens' start: iid (n i.i.d. draws of "
            "N(mu0, Sigma0)) or matched (those draws moved affinely so "
            "that their empirical mean and covariance are mu0 and Sigma0 "
            "exactly)",
            choices=STARTS,
        ),
        "sinkhorn_iterations": Sinkhorn.params["sinkhorn_iterations"],
    }
    equation = "ode"
    integrator = Softmax.integrator

    @staticmethod
    def tokens(spec):
        """The particles system of the point's kind."""
        return TOKENS[spec["kind"]]()

    def validate(self, spec) -> None:
        if spec["start"] == "matched" and spec["n"] <= spec["d"]:
            raise dyn.ScenarioError(
                "params.n",
                f"a matched start needs n > d (its empirical "
                f"covariance invertible), got n = {spec['n']}, d = "
                f"{spec['d']}",
            )
        self.tokens(spec).validate(spec)

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        return self.tokens(spec).simulate(spec, runs)

    def run_bytes(self, spec) -> int:
        return self.tokens(spec).run_bytes(spec)

    def outputs(self, setup) -> list:
        outs = [dyn.Output(k, f"{v} (mean over runs)", "1", ("time",), "mean_se") for k, v in _LABELS.items()]
        outs += [
            dyn.Output(
                "mean_error",
                "|m - m(t)|: empirical mean against the moment ODE (mean over runs)",
                "1",
                ("time",),
                "mean_se",
            ),
            dyn.Output(
                "cov_error",
                "|S - S(t)|_F: empirical covariance against the moment ODE (mean over runs)",
                "1",
                ("time",),
                "mean_se",
                draw=dyn.Draw(slopes=(-0.5,)),
            ),
            dyn.Output(
                "mean_paired",
                "<m - m_own(t), u>: the empirical mean against the "
                "moment ODE from the run's own initial empirical moments (mean over "
                "runs)",
                "1",
                ("time",),
                "mean_se",
                nan_means="some run's own moment ODE blows up before the horizon "
                "(an empirical eigenvalue above 1/beta: few tokens)",
            ),
            dyn.Output(
                "step_floor",
                "|S_rk4(T) - S(T)|_F: the moment ODE by RK4 at the scenario's step against solve_ivp (the step error)",
                "1",
                (),
                "point",
            ),
        ]
        return outs

    def point_values(self, spec) -> dict:
        mu0, cov0 = start(spec["d"], spec["mean0"], spec["var0"], spec["aniso"])
        _, s = moments(spec["kind"], spec["beta"], mu0, cov0, spec.times)
        _, r = moments_rk4(spec["kind"], spec["beta"], mu0, cov0, spec.times, spec.dt)
        return {"step_floor": float(np.linalg.norm(r[-1] - s[-1]))}

    def references(self, setup) -> list:
        keys = ("kind", "beta", "mean0", "var0", "aniso", "d")
        dims = tuple(a for a in setup.axes if a in keys)
        finite_keys = keys + ("n", "start")
        finite_dims = tuple(a for a in setup.axes if a in finite_keys)
        times = setup.times
        shape = tuple(len(setup.axes[a]) for a in finite_dims)
        values = {k: np.full(shape + (len(times),), np.nan) for k in MOMENTS}
        finite = {k: np.full(shape + (len(times),), np.nan) for k in MOMENTS}
        paired = np.zeros(shape + (len(times),))
        biases = {}
        for index in np.ndindex(*shape):
            p = {k: setup.params.get(k) for k in finite_keys}
            p.update({a: setup.axes[a][i] for a, i in zip(finite_dims, index, strict=True)})
            mu0, cov0 = start(int(p["d"]), float(p["mean0"]), float(p["var0"]), float(p["aniso"]))
            m, s = moments(p["kind"], float(p["beta"]), mu0, cov0, times)
            for k, v in summaries(m, s, _direction(mu0)).items():
                values[k][index] = v
            if p["kind"] in FINITE_N_KINDS:
                law = tuple(p[k] for k in finite_keys if k != "n")  # n only scales it
                if law not in biases:
                    biases[law] = finite_n_moments(
                        p["kind"], float(p["beta"]), mu0, cov0, times, start=p["start"] or "iid"
                    )
                dm, ds = biases[law]
                m, s = m + dm / int(p["n"]), s + ds / int(p["n"])
                if ("paired",) + law not in biases:
                    biases[("paired",) + law] = finite_n_moments(
                        p["kind"], float(p["beta"]), mu0, cov0, times, start="matched"
                    )[0]
                paired[index] = biases[("paired",) + law] @ _direction(mu0) / int(p["n"])
            for k, v in summaries(m, s, _direction(mu0)).items():
                finite[k][index] = v
        keep = tuple(slice(None) if a in dims else 0 for a in finite_dims)  # n: any
        refs = []
        for k in MOMENTS:
            refs.append(
                dyn.Reference(
                    f"{k}_ode",
                    f"{_LABELS[k]}: the moment ODE (n -> oo)",
                    values[k][keep],
                    dims + ("time",),
                    draw=dyn.Draw(over=(k,), color="black", label="moment ODE"),
                )
            )
            refs.append(
                dyn.Reference(
                    f"{k}_finite_n",
                    f"{_LABELS[k]}: E over n tokens to O(1/n), the moment ODE plus "
                    "the derived finite-n bias (softmax, L2, Sinkhorn; the moment ODE itself for masked)",
                    finite[k],
                    finite_dims + ("time",),
                )
            )
        refs.append(
            dyn.Reference(
                "mean_paired_finite_n",
                "<m - m_own(t), u>: E over n tokens to O(1/n), the matched "
                "start's derived bias of the mean (softmax, L2, Sinkhorn; zero for masked)",
                paired,
                finite_dims + ("time",),
            )
        )
        return refs
