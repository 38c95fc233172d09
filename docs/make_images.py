"""Regenerate the pictures of docs/images, the README's and the site's, with the commands a user
types: `dyn run` for each scenario, then `dyn plot`, `dyn compare`, `dyn plot --tokens` or
`dyn animate`.

    python docs/make_images.py                        # every picture (each scenario's full run)
    python docs/make_images.py attention_clusters.png # only these
    python docs/make_images.py --list                 # the pictures and their commands

The runs go to outputs/docs_images/ (kept, so a second call that draws another picture of the
same run does not run it again; --rerun runs them anew). For every picture `dyn plot` draws, the
labels it derived from the file (the title, each panel's axis labels and the colour bar's) are
written to docs/images/labels.json, beside the picture. tests/test_docs_images.py checks each
recorded picture's labels against those of a fresh, cut-down run of the same scenario (two runs
per point, two values per swept axis): a picture older than the code that labels it fails there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
LABELS = IMAGES / "labels.json"
RUNS = ROOT / "outputs" / "docs_images"


class Recipe(NamedTuple):
    """How a picture is made: run `scenario` (with `sets`, `--set KEY=VALUE` each), then draw
    the file with the command `draw` ("plot", "compare", "tokens" or "animate") and `args`."""

    scenario: str
    draw: str = "plot"
    args: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()


# each scenario's own picture, as `dyn plot FILE` draws it
PLOTTED = """antipodal_census attention_clusters attention_svm causal_clusters critical_scaling
equiangular gaussian_attention hardmax_limit icl_autoregressive implicit_regularization
linear_icl_flow lost_in_the_middle markov_collapse mean_field_modes metastability metastable_counts
momentum_limit momentum_linear momentum_optimize noisy_hysteresis noisy_hysteresis_sphere
noisy_phase noisy_sphere normalization_speed positional_attention repulsive_sync resnet_adjoint
resnet_ode_limit reverse_diffusion reverse_diffusion_samples sinkformer_energy sinkformer_heat
sinkhorn_iterations softmax_polarization transition_order two_token_phase""".split()
# rates against a reference, as the scenario files' comments give `dyn compare`
COMPARED = {
    "attention_depth_limit": "--along form --reference flow --against depth",
    "causal_kernel_descent": "--reference exact --against depth",
    "depth_width_limit": "--along form --reference ode --against depth",
    "icl_context": "--reference exact --against context --statistic median",
    "linear_icl_gd": "--reference exact --against steps",
    "sde_bias_noisy_phase": "--observable r_stationary --along dt --reference 0.0125 "
    "--reference-at method=stochastic_heun --against dt",
    "sinkformer_depth_limit": "--along form --reference flow --against depth",
    "transformer_depth_limit": "--along depth --reference 16384 --against depth --at final",
}
# the README's "Tokens you can see": attention_clusters at beta = 4 with its states saved
_TOKENS = ("output.trajectories=true", "ensemble.runs=2", "sweep.beta=[4.0]")

RECIPES: dict[str, Recipe] = {
    **{f"{name}.png": Recipe(name) for name in PLOTTED},
    **{f"{name}_compare.png": Recipe(name, "compare", tuple(args.split())) for name, args in COMPARED.items()},
    # the README's pictures of these two draw one slice of the sweep against a second axis
    "sparse_attention_clusters.png": Recipe(
        "sparse_attention_clusters",
        "plot",
        ("--var", "n_clusters", "--sel", "d=2", "--sel", "n=64", "--hue", "normalization"),
    ),
    "next_token_scc.png": Recipe(
        "next_token_scc",
        "plot",
        ("--var", "mass_law", "--sel", "levels=3", "--sel", "logit_scale=1", "--hue", "replica"),
    ),
    "tokens_circle.png": Recipe("attention_clusters", "tokens", ("--point", "beta=4", "--time", "5"), _TOKENS),
    "tokens_circle.gif": Recipe("attention_clusters", "animate", ("--point", "beta=4"), _TOKENS),
    "tokens_sphere.png": Recipe(
        "attention_clusters", "tokens", ("--point", "beta=4", "--time", "5"), (*_TOKENS, "params.d=3")
    ),
    "tokens_sphere.gif": Recipe("attention_clusters", "animate", ("--point", "beta=4"), (*_TOKENS, "params.d=3")),
}


def _dyn(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "dyn", *args], cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"make_images: `dyn {' '.join(args)}` failed (exit {done.returncode})")


def run(recipe: Recipe, folder: Path, sets: tuple[str, ...] = (), again: bool = False) -> Path:
    """The result file of the recipe's run (with `sets` added), run unless already there."""
    key = "_".join([recipe.scenario, *(re.sub(r"\W+", "-", s) for s in recipe.sets + sets)])
    out = folder / f"{key}.h5"
    if again or not out.exists():
        folder.mkdir(parents=True, exist_ok=True)
        extra = [a for s in recipe.sets + sets for a in ("--set", s)]
        _dyn("run", recipe.scenario, "--out", str(out), *extra, "--no-progress", "--overwrite")
    return out


def draw(recipe: Recipe, result: Path, out: Path) -> None:
    if recipe.draw == "plot":
        _dyn("plot", str(result), "--out", str(out), *recipe.args)
    elif recipe.draw == "tokens":
        _dyn("plot", str(result), "--tokens", "--out", str(out), *recipe.args)
    else:  # compare, animate
        _dyn(recipe.draw, str(result), "--out", str(out), *recipe.args)


def _words(text: str) -> str:
    return " ".join(text.split())


def labels(result: Path) -> dict:
    """What `dyn plot` writes on the picture of `result` from the file's attributes: the title
    (the count of runs per point made N: it is no label) and the axis labels of each panel and
    colour bar (wrapped lines joined), each pair once, sorted."""
    import matplotlib.pyplot as plt

    from dyn.presentation.plot import figure

    fig = figure(result)
    try:
        title = re.sub(r"\b\d+ runs? per point", "N runs per point", _words(fig.get_suptitle()))
        axes = sorted({(_words(ax.get_xlabel()), _words(ax.get_ylabel())) for ax in fig.axes if ax.get_visible()})
    finally:
        plt.close(fig)
    return {"title": title, "axes": [list(pair) for pair in axes]}


def quick_sets(scenario: str) -> tuple[str, ...]:
    """The cut-down run of a scenario: two runs per point, each swept axis at its first and last
    value (a range at num = 2). Nothing the labels come from changes."""
    path = ROOT / "scenarios" / f"{scenario}.toml"
    sweep = tomllib.loads(path.read_text()).get("sweep", {})
    sets = ["ensemble.runs=2"]
    for axis, values in sweep.items():
        if isinstance(values, list) and len(values) > 2:
            sets.append(f"sweep.{axis}={json.dumps([values[0], values[-1]])}")
        elif isinstance(values, dict) and values.get("num", 0) > 2:
            spec = ", ".join(f"{k} = {json.dumps(2 if k == 'num' else v)}" for k, v in values.items())
            sets.append(f"sweep.{axis}={{{spec}}}")
    return tuple(sets)


def fresh_labels(name: str, folder: Path) -> dict:
    """The labels picture `name` would have if drawn now, from a cut-down run into `folder`."""
    recipe = RECIPES[name]
    return labels(run(recipe, folder, quick_sets(recipe.scenario), again=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="pictures to make (default: all)")
    parser.add_argument("--list", action="store_true", help="list the pictures and commands")
    parser.add_argument("--rerun", action="store_true", help="run the scenarios again")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in RECIPES]
    if unknown:
        print(f"make_images: no recipe for {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    names = args.names or sorted(RECIPES)
    if args.list:
        for name in names:
            r = RECIPES[name]
            sets = "".join(f" --set {s}" for s in r.sets)
            print(f"{name}: dyn run {r.scenario}{sets}; dyn {r.draw} {' '.join(r.args)}")
        return 0
    recorded = json.loads(LABELS.read_text()) if LABELS.exists() else {}
    for name in names:
        recipe = RECIPES[name]
        result = run(recipe, RUNS, again=args.rerun)
        draw(recipe, result, IMAGES / name)
        if recipe.draw == "plot":
            recorded[name] = {"scenario": recipe.scenario, **labels(result)}
        LABELS.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        print(f"wrote docs/images/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
