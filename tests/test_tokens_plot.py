"""Pictures of saved states (`dyn plot --tokens`, `dyn animate`), checked on the drawn objects."""

from __future__ import annotations

import numpy as np
import pytest

import dyn
from dyn.presentation import tokens
from dyn.presentation.cli import main

TINY = """
[scenario]
name = "tiny_tokens"
system = "attention_sphere"

[params]
n = 7
d = {d}
init = "uniform"

[sweep]
beta = [1.0, 4.0]

[ensemble]
runs = 2
seed = 11

[integrator]
backend = "numba"
method = "rk4"
dt = 0.1
horizon = 2.0

[output]
saves = 4
trajectories = {states}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Tiny runs with states on the circle, on S^2 and in d = 4, and one without states."""
    root = tmp_path_factory.mktemp("tokens")
    made = {}
    for key, d, states in (("circle", 2, "true"), ("sphere", 3, "true"), ("d4", 4, "true"), ("plain", 2, "false")):
        scenario = root / f"{key}.toml"
        scenario.write_text(TINY.format(d=d, states=states))
        made[key] = dyn.run(scenario, root / f"{key}.h5", progress=False)
    return made


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _saved(path, beta, run, time):
    with dyn.open(path) as ds:
        return ds["trajectory"].sel(beta=beta, trajectory_time=time).isel(run=run).values


def _drawn(fig):
    """The figure's axes but its colour bar's."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _dots(ax):
    return [c for c in ax.collections if len(c.get_offsets()) == 7][0]


def test_circle_points_are_the_saved_states_and_the_histogram_counts_them(files):
    fig = tokens.figure(files["circle"], ["beta=3.9"], time=1.1, run=1)  # nearest: 4.0, t = 1.0
    circle, hist = _drawn(fig)
    xy = np.asarray(_dots(circle).get_offsets())
    np.testing.assert_allclose(np.linalg.norm(xy, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(xy, _saved(files["circle"], 4.0, 1, 1.0), atol=1e-12)
    assert sum(p.get_height() for p in hist.patches) == 7
    text = fig._suptitle.get_text()
    assert "beta = 4" in text and "run 1" in text and "circle" in text
    assert fig.texts[0].get_text() == "t = 1"
    # by default: the first point, said in the title, at the last time
    fig = tokens.figure(files["circle"])
    assert "beta = 1 (first point" in fig._suptitle.get_text() and fig.texts[0].get_text() == "t = 2"
    np.testing.assert_allclose(_dots(fig.axes[0]).get_offsets(), _saved(files["circle"], 1.0, 0, 2.0), atol=1e-12)


def test_sphere_is_drawn_in_3d_on_the_sphere(files):
    fig = tokens.figure(files["sphere"], ["beta=4"], time=0.5)
    (ax,) = _drawn(fig)
    assert ax.name == "3d"
    dots = [c for c in ax.collections if hasattr(c, "_offsets3d")][-1]
    xyz = np.column_stack([np.asarray(a, dtype=float) for a in dots._offsets3d])
    np.testing.assert_allclose(np.linalg.norm(xyz, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(xyz, _saved(files["sphere"], 4.0, 0, 0.5), atol=1e-12)


def test_higher_dimension_is_a_projection_said_in_the_title(files):
    fig = tokens.figure(files["d4"])
    assert "projection on the first two principal directions" in fig._suptitle.get_text()
    xy = np.asarray(_dots(fig.axes[0]).get_offsets())
    assert xy.shape == (7, 2) and np.all(np.linalg.norm(xy, axis=1) <= 1 + 1e-12)


def test_gif_has_one_frame_per_save_and_the_clock_moves(files, tmp_path):
    from PIL import Image

    states = tokens.load(files["circle"], ["beta=4"])
    picture = tokens.Picture(states)
    clocks = set()
    for k in range(len(states.times)):
        picture.show(k)
        clocks.add(picture.clock.get_text())
    assert len(clocks) == len(states.times) == 5
    out = tmp_path / "tokens.gif"
    assert main(["animate", str(files["circle"]), "--point", "beta=4", "--out", str(out)]) == 0
    with Image.open(out) as gif:
        assert gif.n_frames == 5
    assert tokens.frames(101).tolist()[:2] == [0, 2] and len(tokens.frames(101)) == 60
    assert tokens.frames(101)[-1] == 100


def test_cli_draws_the_png(files, tmp_path, capsys):
    out = tmp_path / "t.png"
    args = ["plot", str(files["circle"]), "--tokens", "--point", "beta=4", "--time", "1"]
    assert main(args + ["--out", str(out)]) == 0
    assert out.exists() and "plotted" in capsys.readouterr().out


@pytest.mark.parametrize(
    "key, args, words",
    [
        ("plain", ["plot", "--tokens"], "has no saved states"),
        ("circle", ["plot", "--tokens", "--point", "gamma=1"], "unknown axis 'gamma'"),
        ("circle", ["plot", "--tokens", "--point", "beta=9"], "out of range [1, 4]"),
        ("circle", ["plot", "--tokens", "--point", "beta"], "expected AXIS=VALUE"),
        ("circle", ["plot", "--tokens", "--time", "-1"], "--time: -1 is out of range"),
        ("circle", ["plot", "--tokens", "--run", "2"], "--run: 2 is out of range"),
        ("circle", ["plot", "--point", "beta=4"], "use it with --tokens"),
        ("plain", ["animate"], "has no saved states"),
        ("circle", ["animate", "--out", "x.avi"], "expected a .gif or .mp4"),
    ],
)
def test_bad_choices_exit_2_with_one_line(files, tmp_path, capsys, key, args, words):
    command, *rest = args
    rest = [str(tmp_path / a) if a == "x.avi" else a for a in rest]
    assert main([command, str(files[key]), *rest]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dyn: error: ") and words in err and len(err.splitlines()) == 1


def test_mp4_needs_ffmpeg(files, tmp_path, capsys):
    from matplotlib import animation

    if animation.writers.is_available("ffmpeg"):
        pytest.skip("ffmpeg is installed here")
    assert main(["animate", str(files["circle"]), "--out", str(tmp_path / "t.mp4")]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs ffmpeg" in err and len(err.splitlines()) == 1


def test_a_colour_bar_says_what_the_token_colours_are(files):
    for key in ("circle", "sphere"):
        fig = tokens.figure(files[key])
        (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
        assert bar.get_ylabel() == tokens.COLOUR_LABEL
    picture = tokens.Picture(tokens.load(files["circle"], ["beta=4"]))
    picture.show(2)
    circle, mappable = picture.ax, picture.colour_bar.mappable
    # each dot's colour is the bar's colour at the token's rank by its angle at the first save
    with dyn.open(files["circle"]) as ds:
        first = ds["trajectory"].sel(beta=4.0).isel(run=0, trajectory_time=0).values
    ranks = np.argsort(np.argsort(np.arctan2(first[:, 1], first[:, 0]), kind="stable"), kind="stable")
    np.testing.assert_allclose(_dots(circle).get_facecolors(), mappable.to_rgba(ranks), atol=1e-12)
    assert mappable.norm.vmin == 0 and mappable.norm.vmax == 7
