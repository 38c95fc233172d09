"""Peak memory and time of one forward+backward pass against depth: memory-free adjoint vs backprop.

    PYTHONPATH=. python benchmarks/resnet_memory.py [--depths 16 64 256 1024 4096] [--batch 128]

Network: weights as smooth functions of depth (``dyn.resnet.adjoint.fourier_output``: K cosine
modes, so the parameters and their gradient do not grow with depth), d = 16, width 32, Euler
form, loss 0.5 mean |x_N - y|^2, gradient w.r.t. the input and the coefficients. float64, CPU.

Each (depth, method) runs in a fresh subprocess, so nothing is shared between measurements:
- ``xla_temp``: XLA's own account of the compiled program's scratch memory
  (``jit(f).lower(...).compile().memory_analysis().temp_size_in_bytes``): what the pass needs
  beyond its inputs and outputs, i.e. the stored activations;
- ``rss_peak``: the process's peak resident memory during the first execution minus its resident
  memory just before it (Linux: the peak VmHWM is reset through /proc/self/clear_refs after
  compiling, so compile-time peaks do not count);
- ``time``: best of ``--repeat`` executions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from _timing import add_smoke

D, WIDTH, MODES = 16, 32, 4


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def measure(depth: int, method: str, batch: int, repeat: int) -> dict:
    """Run in the child process: one configuration, printed as JSON."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dyn.resnet import adjoint, weights

    rng = np.random.default_rng(0)
    wf = weights.smooth_weights(rng, D, WIDTH, MODES)
    x0, y = rng.standard_normal((batch, D)), rng.standard_normal((batch, D))
    args = tuple(jnp.asarray(a) for a in (x0, y, wf.AW, wf.AV))

    def loss(x0, y, AW, AV):
        xN = adjoint.fourier_output(x0, AW, AV, depth=depth, adjoint=method == "adjoint")
        return adjoint.mse(xN, y)

    compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 2, 3))).lower(*args).compile()
    mem = compiled.memory_analysis()
    rss_before = _status_kib("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the peak-RSS counter (VmHWM) to the current RSS
        reset = True
    except OSError:
        reset = False
    jax.block_until_ready(compiled(*args))
    rss_peak = _status_kib("VmHWM") - rss_before if reset else float("nan")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return {
        "depth": depth,
        "method": method,
        "xla_temp_mib": mem.temp_size_in_bytes / 2**20,
        "rss_peak_mib": rss_peak / 1024,
        "time_s": min(times),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("DEPTH", "METHOD"), help=argparse.SUPPRESS)
    add_smoke(ap)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(int(a.child[0]), a.child[1], a.batch, a.repeat)))
        return
    if a.smoke:  # two small depths, measured in this process (a child per pair costs seconds)
        a.depths, a.batch, a.repeat = [2, 4], 2, 1
    rows = {}
    for depth in a.depths:
        for method in ("adjoint", "backprop"):
            if a.smoke:
                rows[depth, method] = measure(depth, method, a.batch, a.repeat)
                continue
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    str(depth),
                    method,
                    "--batch",
                    str(a.batch),
                    "--repeat",
                    str(a.repeat),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            rows[depth, method] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"d={D} width={WIDTH} modes={MODES} batch={a.batch} euler float64; memory in MiB")
    print(
        f"{'depth':>6} | {'adjoint: xla_temp rss_peak time':>32} | "
        f"{'backprop: xla_temp rss_peak time':>33} | time ratio"
    )
    for depth in a.depths:
        ad, bp = rows[depth, "adjoint"], rows[depth, "backprop"]
        print(
            f"{depth:>6} | {ad['xla_temp_mib']:>10.2f} {ad['rss_peak_mib']:>9.2f} "
            f"{ad['time_s']:>9.4f}s | {bp['xla_temp_mib']:>10.2f} {bp['rss_peak_mib']:>9.2f} "
            f"{bp['time_s']:>9.4f}s | {ad['time_s'] / bp['time_s']:>6.2f}"
        )
    lo, hi = min(a.depths), max(a.depths)
    for key in ("xla_temp_mib", "rss_peak_mib"):
        ratio = {m: rows[hi, m][key] / max(rows[lo, m][key], 1e-9) for m in ("adjoint", "backprop")}
        print(f"{key}: L={hi} / L={lo}: adjoint {ratio['adjoint']:.2f}x, backprop {ratio['backprop']:.2f}x")


if __name__ == "__main__":
    main()
