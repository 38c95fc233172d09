"""False-failure rates of gaussian_attention's two tests, measured over seeds.

    python benchmarks/gaussian_criterion.py [--seeds 20] [--first 1001] [--n 128 256 512]
                                            [--dir DIR] [--smoke]

Runs the shipped scenario once per seed (`ensemble.seed` = first, first + 1, ...; `--n` cuts
the n axis, the rest unchanged; files kept in DIR and resumed, so an interrupted measurement
goes on), then applies the family-wise test and the calibration test of
dyn/frontier/gaussian_criterion.py to each file: one line per seed, then the number of seeds
each test failed against its nominal rate (alpha = 0.05 each), the largest family-wise |z| and
the Sinkhorn mean's conservation. The scenario is correct to the order the tests resolve, so
every failure is a false one. The whole scenario costs minutes per seed on one core; the
n <= 512 cut about a tenth of that.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import dyn
from _timing import add_smoke
from dyn.frontier import gaussian_criterion as gc

ALPHA = 0.05


def run_seed(seed: int, ns, folder: Path, extra=()) -> Path:
    """The scenario at one seed (n cut to `ns` if given), resumed from `folder`."""
    cut = "all" if not ns else "_".join(map(str, ns))
    overrides = [f"ensemble.seed={seed}", *extra]
    if ns:
        overrides.append(f"sweep.n=[{','.join(map(str, ns))}]")
    return dyn.run("gaussian_attention", out=folder / f"gaussian_{seed}_{cut}.h5", overrides=overrides, progress=False)


def evaluate(path: Path) -> dict:
    """Both tests on one file."""
    ds = dyn.open(path)
    runs = gc.runs_of(ds)
    z = gc.z_scores(ds)
    fw, cal = gc.familywise(z, runs, ALPHA), gc.calibration(z, runs, ALPHA)
    return {"familywise": fw, "calibration": cal, "conserved": gc.conserved_mean(ds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first", type=int, default=1001)
    parser.add_argument("--n", type=int, nargs="*", default=None, help="cut the n axis to these")
    parser.add_argument("--dir", default=None, help="keep the files here (default: a temporary folder)")
    add_smoke(parser)
    args = parser.parse_args()
    extra = ()
    if args.smoke:
        args.seeds, args.n = 2, [128]
        extra = ("ensemble.runs=4", "sweep.d=[2]", "integrator.horizon=0.4", "output.saves=2")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.dir or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        failed = {"familywise": 0, "calibration": 0}
        print("seed  largest|z|  bound  family-wise  smallest p  level  calibration  sinkhorn mean drift / se")
        for seed in range(args.first, args.first + args.seeds):
            found = evaluate(run_seed(seed, args.n, folder, extra))
            fw, cal = found["familywise"], found["calibration"]
            failed["familywise"] += not fw["passed"]
            failed["calibration"] += not cal["passed"]
            print(
                f"{seed}  {fw['largest']:.2f}  {fw['bound']:.2f}  "
                f"{'pass' if fw['passed'] else 'FAIL'}  {cal['smallest']:.2e}  "
                f"{cal['level']:.1e}  {'pass' if cal['passed'] else 'FAIL'}  "
                f"{found['conserved']:.1e}",
                flush=True,
            )
        for test, count in failed.items():
            print(
                f"{test}: failed {count} of {args.seeds} seeds (nominal rate at most "
                f"{ALPHA}: {ALPHA * args.seeds:.1f} expected at most)"
            )


if __name__ == "__main__":
    main()
