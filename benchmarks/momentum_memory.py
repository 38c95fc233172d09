"""Momentum ResNet forward+backward: time and peak memory, ours (JAX) vs the `momentumnet` package.

Workload (the package README's example): f = Linear(500, 8) - Tanh - Linear(8, 500), the same f at
every layer, gamma = 0.9, batch 500 x 500 float32, depth 10, 100, 1000; loss = sum of the output,
gradient with respect to the parameters of f.

Modes:
- stored: ordinary backprop that keeps activations (torch autograd; JAX grad through lax.scan);
- memory_free: activations rebuilt by inverting the network during the backward pass
  (momentumnet `use_backprop=False`: v as int64 fixed point with an int64 "BitStore" of the bits
  lost multiplying by gamma, x in float; ours `momentum_net(memory_free=True)`: float inverse);
- exact (ours only): `momentum_net(exact=True)`, x and v int64 fixed point and a multi-limb
  information buffer (~log2(1/gamma) bits per entry and layer), rebuilt bit for bit.

Each (implementation, mode, depth) runs in a fresh subprocess, with `--threads` threads for both
libraries (default 1: on a shared machine, spinning thread pools make multi-threaded timings
meaningless; torch with 2 threads on 2 busy cores ran 50x slower than with 1). Peak memory = max RSS sampled every
0.5 ms by a thread during the FIRST forward+backward, minus the RSS just before it (JAX is compiled
ahead of time, before the baseline). Time = best of `--repeats` later calls. Also reported: the
gradient's error, max |g - g_ref| / max |g_ref| over the parameter tensors, against the same
library's stored-activation gradient in float64 (same weights and input): rebuilding activations
by inversion is only as good as the inverse (gamma^-depth amplifies float rounding).

Setup (momentumnet must never be a dependency of the project; it lives in its own venv):

    python3 -m venv /tmp/bench-venv
    /tmp/bench-venv/bin/pip install torch==2.13.0       # exactly this: the local CPU build
    /tmp/bench-venv/bin/pip install --no-deps momentumnet
    /tmp/bench-venv/bin/pip install numpy jax
    /tmp/bench-venv/bin/python benchmarks/momentum_memory.py [--depths 10 100 1000] [--repeats 3]

Our side is loaded from this checkout's dyn/momentum/backprop.py by path (it needs only JAX).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import add_smoke  # noqa: E402

D, HIDDEN, BATCH, GAMMA = 500, 8, 500, 0.9
SAMPLE_S = 5e-4
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


class PeakRSS:
    """Max RSS seen by a sampling thread while the block runs, minus RSS on entry."""

    def __enter__(self):
        self.base = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(SAMPLE_S)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())
        self.delta_mb = (self.peak - self.base) / 2**20


def weights(seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return (
        rng.uniform(-1, 1, (D, HIDDEN)).astype("float32") / D**0.5,
        rng.uniform(-1, 1, HIDDEN).astype("float32") / D**0.5,
        rng.uniform(-1, 1, (HIDDEN, D)).astype("float32") / HIDDEN**0.5,
        rng.uniform(-1, 1, D).astype("float32") / HIDDEN**0.5,
        rng.standard_normal((BATCH, D)).astype("float32"),
    )


def run_torch(mode: str, depth: int, repeats: int) -> dict:
    import torch
    from momentumnet import MomentumNet
    from torch import nn

    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))

    W1, b1, W2, b2, x = weights()
    f = nn.Sequential(nn.Linear(D, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, D))
    with torch.no_grad():
        f[0].weight.copy_(torch.from_numpy(W1.T.copy()))
        f[0].bias.copy_(torch.from_numpy(b1))
        f[2].weight.copy_(torch.from_numpy(W2.T.copy()))
        f[2].bias.copy_(torch.from_numpy(b2))
    x = torch.from_numpy(x)

    def step(use_backprop, fn=f, inp=x):
        net = MomentumNet([fn] * depth, gamma=GAMMA, use_backprop=use_backprop)
        fn.zero_grad()
        net(inp).sum().backward()
        return [p.grad.numpy().copy() for p in fn.parameters()]

    use_backprop = mode == "stored"
    with PeakRSS() as mem:
        grads = step(use_backprop)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step(use_backprop)
        times.append(time.perf_counter() - t0)
    ref = step(True, f.double(), x.double())
    return {"time_s": min(times), "peak_mb": mem.delta_mb, "grad_rel_err": rel_err(grads, ref)}


def rel_err(grads, ref) -> float:
    import numpy as np

    with np.errstate(invalid="ignore"):
        errs = [
            float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))
            for a, b in zip(grads, ref, strict=True)
        ]
    return float("nan") if any(e != e for e in errs) else max(errs)


def run_jax(mode: str, depth: int, repeats: int) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)  # int64 for the exact mode; arrays stay float32
    import jax.numpy as jnp

    spec = importlib.util.spec_from_file_location("momentum_backprop", ROOT / "dyn" / "momentum" / "backprop.py")
    backprop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backprop)

    *theta, x = (jnp.asarray(a) for a in weights())
    theta = tuple(theta)

    def f(x, th):
        W1, b1, W2, b2 = th
        return jnp.tanh(x @ W1 + b1) @ W2 + b2

    def make(mode, th=theta, inp=x):
        net = backprop.momentum_net(f, GAMMA, depth, shared=True, memory_free=mode != "stored", exact=mode == "exact")
        loss = lambda th, x: jnp.sum(net(th, x, jnp.zeros_like(x))[0])
        return jax.jit(jax.grad(loss)).lower(th, inp).compile()

    grad = make(mode)
    analysis = grad.memory_analysis()
    with PeakRSS() as mem:
        grads = jax.block_until_ready(grad(theta, x))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(grad(theta, x))
        times.append(time.perf_counter() - t0)
    th64, x64 = tuple(t.astype(jnp.float64) for t in theta), x.astype(jnp.float64)
    ref = make("stored", th64, x64)(th64, x64)
    return {
        "time_s": min(times),
        "peak_mb": mem.delta_mb,
        "grad_rel_err": rel_err(grads, ref),
        "xla_temp_mb": getattr(analysis, "temp_size_in_bytes", float("nan")) / 2**20,
    }


def smoke() -> None:
    """Our side at a tiny width and depth, every mode, in this process (the package's side needs
    its own venv, see the header): that the script runs, not how fast."""
    global D, HIDDEN, BATCH
    D, HIDDEN, BATCH = 8, 4, 4
    for mode in MODES["dyn-jax"]:
        r = run_jax(mode, 3, 1)
        print(
            f"dyn-jax      {mode:<12}     3 {r['time_s']:>8.3f} {r['peak_mb']:>9.1f} "
            f"{r['xla_temp_mb']:>11.3f} {r['grad_rel_err']:>12.2e}"
        )


WORKERS = {"momentumnet": run_torch, "dyn-jax": run_jax}
MODES = {"momentumnet": ("stored", "memory_free"), "dyn-jax": ("stored", "memory_free", "exact")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depths", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--impls", nargs="+", default=list(WORKERS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", nargs=3, metavar=("IMPL", "MODE", "DEPTH"), help=argparse.SUPPRESS)
    add_smoke(ap)
    args = ap.parse_args()
    if args.worker:
        impl, mode, depth = args.worker
        print(json.dumps(WORKERS[impl](mode, int(depth), args.repeats)))
        return
    if args.smoke:
        smoke()
        return
    print(f"threads = {args.threads}, gamma = {GAMMA}, batch {BATCH} x {D}, hidden {HIDDEN}")
    print(
        f"{'impl':<12} {'mode':<12} {'depth':>5} {'time_s':>8} {'peak_MB':>9} {'xla_temp_MB':>11} {'grad_rel_err':>12}"
    )
    for depth in args.depths:
        for impl in args.impls:
            for mode in MODES[impl]:
                cmd = [sys.executable, __file__, "--worker", impl, mode, str(depth), "--repeats", str(args.repeats)]
                env = dict(
                    os.environ,
                    BENCH_THREADS=str(args.threads),
                    OMP_NUM_THREADS=str(args.threads),
                    XLA_FLAGS=f"--xla_cpu_multi_thread_eigen={'true' if args.threads > 1 else 'false'} "
                    f"intra_op_parallelism_threads={args.threads}",
                )
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if proc.returncode:
                    print(f"{impl:<12} {mode:<12} {depth:>5} FAILED: {proc.stderr.strip().splitlines()[-1:]}")
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                print(
                    f"{impl:<12} {mode:<12} {depth:>5} {r['time_s']:>8.3f} {r['peak_mb']:>9.1f} "
                    f"{r.get('xla_temp_mb', float('nan')):>11.1f} "
                    f"{r.get('grad_rel_err', float('nan')):>12.2e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
