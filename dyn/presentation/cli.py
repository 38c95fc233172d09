"""The `dyn` command (also `python -m dyn`): run, show, plot, animate, compare, list, describe.

Bad input exits with status 2 and one line `dyn: error: KEY: problem`; a run stopped by a
signal exits with 128 + its number (Ctrl-C/SIGINT 130, SIGTERM 143, SIGHUP 129) after one line,
and resumes when the same command is given again. `dyn run` exits with 3 when the file
holds points that diverged or failed (scripts and CI can tell), 0 when every point is ok.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import sys
from pathlib import Path

from ..core.errors import ScenarioError, UserExit, printable

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"
EXIT_POINTS = 3  # `dyn run` finished, but some points diverged or failed


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other error (status 2)."""

    def error(self, message: str):
        self.exit(2, f"dyn: error: {printable(message)} (see `{self.prog} --help`)\n")


STYLES = ("default", "paper")  # dyn.presentation.styles.STYLE_NAMES, without importing numpy to parse


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dyn", description="Sweeps of token and depth dynamics.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="run (or resume) a scenario sweep into one HDF5 file")
    run.add_argument("scenario", help="scenario TOML file (or the name of a shipped scenario)")
    run.add_argument("--out", help="output file (default: [output] path, else outputs/NAME.h5)")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override TABLE.KEY with a TOML value, e.g. --set sweep.beta=[1.0,2.0]; "
        "a new integrator.method drops the file's solver options it does not take "
        "(saying so)",
    )
    _unset_option(run)
    run.add_argument(
        "--workers", type=int, default=None, help="worker processes (default 1, or all cores with --executor process)"
    )
    run.add_argument(
        "--executor",
        choices=("serial", "process", "dask", "submitit"),
        default=None,
        help="serial (in-process), process (a local pool), dask (a cluster) or "
        "submitit (a SLURM job array); default serial, or process when "
        "--workers > 1",
    )
    for flag, kind, text in (
        ("partition", str, "SLURM partition"),
        ("time-minutes", int, "time limit of each array task, minutes"),
        ("cpus-per-task", int, "cores (numba threads) of each task"),
        ("mem-gb", float, "memory of each task, GB"),
        ("array-parallelism", int, "array tasks running at once"),
        ("points-per-task", int, "points each task computes (default: about 10 minutes of work, from a calibration)"),
    ):
        run.add_argument(
            f"--slurm-{flag}",
            type=kind,
            default=None,
            dest=f"slurm_{flag.replace('-', '_')}",
            help=f"with --executor submitit: {text} (else [executor] {flag.replace('-', '_')})",
        )
    run.add_argument(
        "--scheduler", metavar="ADDRESS", help="Dask scheduler address (default: a LocalCluster of --workers processes)"
    )
    run.add_argument(
        "--point-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop a point running longer and record it failed (process or dask "
        "executor: compiled code cannot be stopped inside a serial run)",
    )
    run.add_argument("--plot", action="store_true", help="draw the default plot when done")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--force", action="store_true", help="make a sweep file estimated past the size limit (1 GiB)")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the sweep's estimated file size and time (from a few points run with a few runs) and write nothing",
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an output file made by another scenario, or a damaged one "
        "(an intact file of this scenario is resumed)",
    )
    run.add_argument(
        "--allow-version-change",
        action="store_true",
        help="resume a file whose points were computed under other versions of "
        "numpy, scipy, numba, jax or diffrax (each point records its versions)",
    )

    comp = sub.add_parser(
        "compile",
        help="compile every numba kernel into numba's cache now, "
        "one process per core (else each sweep compiles its own on first use)",
    )
    comp.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")

    show = sub.add_parser("show", help="print a sweep file's scenario, axes, variables, completion")
    show.add_argument("path")
    show.add_argument("--scenario", action="store_true", help="print the resolved scenario TOML")
    show.add_argument(
        "--errors",
        action="store_true",
        help="print the error budget point by point: Monte Carlo error, step error, horizon or stationarity status",
    )

    plot = sub.add_parser("plot", help="draw a sweep file (PNG, or PDF/SVG with --style paper)")
    plot.add_argument("path")
    plot.add_argument(
        "--out",
        help="output path (default: beside the file, .png; .pdf with "
        "--style paper, which writes .pdf or .svg by the suffix)",
    )
    plot.add_argument(
        "--var", help="variable to draw (default: the scenario's choice); its picture is NAME_VAR.png beside the file"
    )
    plot.add_argument(
        "--sel",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="draw the variable at one value of a dimension (nearest; repeat for "
        "several): a heat map becomes a curve, too many panels fewer",
    )
    plot.add_argument(
        "--hue",
        metavar="AXIS",
        help="one curve per value of AXIS on each panel "
        "(a legend entry each, with error bands), against time for a series, else the "
        "first other numeric axis: r against K with one curve per n",
    )
    plot.add_argument("--log", action="store_true", help="values on a log scale (colours of a heat map, y of curves)")
    plot.add_argument(
        "--style",
        choices=STYLES,
        default="default",
        help="default: a PNG for the screen; paper: a vector figure for a "
        "two-column paper (3.4 in wide, several panels 7 in; 8-9 pt fonts)",
    )
    plot.add_argument(
        "--tokens",
        action="store_true",
        help="draw the saved states (tokens) of one run at one time instead (needs [output] trajectories = true)",
    )
    _state_choices(plot)
    _trust_flag(plot)
    plot.add_argument("--time", type=float, help="with --tokens: the save time (nearest; default the last)")

    animate = sub.add_parser(
        "animate", help="a movie (GIF, or MP4 with ffmpeg) of the saved states of one run over the save times"
    )
    animate.add_argument("path")
    animate.add_argument("--out", help=".gif or .mp4 path (default: NAME_tokens.gif beside the file)")
    _state_choices(animate)
    animate.add_argument("--fps", type=int, default=12, help="frames per second (default 12)")

    compare = sub.add_parser(
        "compare",
        help="distance of each value of an axis to a reference "
        "value, run by run on saved states (the strong error), or with --observable the bias "
        "of an output paired run by run (the weak error); rate against a numeric axis",
    )
    compare.add_argument("path")
    compare.add_argument("--along", help="the sweep axis compared (e.g. form)")
    compare.add_argument(
        "--reference",
        required=True,
        help="its reference value (e.g. flow); "
        "exact without --along: each run against the model's reference(x0, ..., t)",
    )
    compare.add_argument("--against", help="numeric axis to fit the log-log rate against (e.g. depth)")
    compare.add_argument(
        "--observable",
        help="the weak error instead: bias of this output (kept per run: output.per_run) against the "
        "reference point, paired run by run, e.g. r_stationary along dt",
    )
    compare.add_argument(
        "--reference-at",
        action="append",
        metavar="AXIS=VALUE",
        help="with --observable: the reference point's value on another common axis "
        "(e.g. method=stochastic_heun); repeatable",
    )
    compare.add_argument(
        "--statistic",
        choices=("error", "mean", "median"),
        default="error",
        help="with --against: fit the RMS distance over runs (error, the strong error), its mean or its median",
    )
    compare.add_argument(
        "--at",
        choices=("all", "final"),
        default="all",
        help="distance over all saved times (their maximum) or the final one",
    )
    compare.add_argument(
        "--out",
        help="picture of the error curve (default: beside the file, .png; "
        ".pdf with --style paper, which writes .pdf or .svg by the suffix)",
    )
    compare.add_argument(
        "--style",
        choices=STYLES,
        default="default",
        help="default: a PNG for the screen; paper: a vector figure for a two-column paper (as dyn plot --style paper)",
    )
    _trust_flag(compare)

    _discovery(sub)
    return parser


def _trust_flag(parser) -> None:
    """--trust-model: the one way a reader loads the user's model a file names."""
    parser.add_argument(
        "--trust-model",
        action="store_true",
        help="read what the file does not record of its model (files written by "
        "older versions) from the model's module: it is imported (its code runs) "
        "only if its sha256 is the one the file records. Without it, reading a "
        "file never runs code the file names",
    )


def _discovery(sub) -> None:
    """`dyn list [SYSTEM]` and its alias `dyn describe SYSTEM`."""
    listing = sub.add_parser(
        "list",
        help="built-in systems and shipped scenarios; with a name, what that system takes and gives (as dyn describe)",
    )
    listing.add_argument(
        "name",
        nargs="?",
        metavar="SYSTEM",
        help="a system (or a shipped scenario: its system): its parameters, "
        "outputs, backends and methods, and the shipped scenarios using it",
    )
    describe = sub.add_parser(
        "describe",
        help="a system's parameters (type, default, bounds, doc), outputs, backends and methods, and shipped scenarios",
    )
    describe.add_argument("name", metavar="SYSTEM", help="a system, or a shipped scenario")


def _unset_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--unset",
        action="append",
        default=[],
        metavar="TABLE.KEY",
        help="remove a key the scenario file sets (it takes its default), e.g. "
        "--unset integrator.dt; before any --set; repeat for several",
    )


def _state_choices(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--point",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="the sweep point (nearest value; repeat for several axes; default the first point)",
    )
    parser.add_argument("--run", type=int, default=0, help="the run (default 0)")


def _scenario_path(name: str) -> Path:
    from ..engine.scenario import scenario_file

    return scenario_file(name)


def _array_flags(args) -> dict:
    """The --slurm-* flags given, by their [executor] keys."""
    return {
        key.removeprefix("slurm_"): value
        for key, value in vars(args).items()
        if key.startswith("slurm_") and value is not None
    }


def _cmd_run(args) -> int:
    from ..engine.runner import run

    _collecting()
    executor = args.executor or (
        "dask" if args.scheduler else "process" if args.workers and args.workers > 1 else "serial"
    )
    if args.workers is not None:
        workers = args.workers
    else:
        workers = _cores() if executor in ("process", "dask") else 1
    if args.dry_run:
        from ..engine.estimate import estimate
        from ..engine.scenario import load

        print(
            estimate(
                load(_scenario_path(args.scenario), args.overrides, args.unset), args.out, workers, command_line=True
            )
        )
        return 0
    path = run(
        _scenario_path(args.scenario),
        args.out,
        workers=workers,
        executor=executor,
        scheduler=args.scheduler,
        array=_array_flags(args),
        overrides=args.overrides,
        unset=args.unset,
        progress=False if args.no_progress else None,
        command=" ".join(["dyn", *sys.argv[1:]]),
        force=args.force,
        overwrite=args.overwrite,
        allow_version_change=args.allow_version_change,
        point_timeout=args.point_timeout,
    )
    if args.plot:
        from .plot import plot

        print(f"plotted {plot(path)}")
    from ..engine.store import bad_points

    return EXIT_POINTS if bad_points(path) else 0


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def _reads_file(command):
    """A command that reads the sweep file `args.path` (show, plot, animate, compare): the
    libraries' warnings are not shown (numpy's invalid values, h5netcdf's undecodable attributes:
    the words of a damaged file come as one line), and when an error escapes while the file is
    read or drawn, a file the HDF5 library cannot read whole is said to be damaged, in one line
    (:func:`dyn.presentation.analysis.damage`); another error is a defect of dyn and stays a
    traceback."""
    import functools

    @functools.wraps(command)
    def reader(args) -> int:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return command(args)
            except (ScenarioError, KeyboardInterrupt, BrokenPipeError):
                raise
            except Exception:
                from .analysis import damage

                problem = damage(args.path)
                if problem:
                    raise ScenarioError("", f"{args.path} is damaged: {problem}") from None
                raise

    return reader


@_reads_file
def _cmd_show(args) -> int:
    _check_sweep_file(args.path)
    from .analysis import open as open_dataset, summary

    if args.errors:
        from .analysis import error_report

        print(error_report(args.path))
    elif args.scenario:
        with open_dataset(args.path) as ds:
            print(ds.attrs["scenario"])
    else:
        print(summary(args.path))
    return 0


def _check_sweep_file(path: str) -> None:
    from ..engine.store import check_sweep_file  # a plain HDF5 file: one line, not a KeyError

    check_sweep_file(path)  # damage on which HDF5 loops or crashes: found in a child first


def _cmd_compile(args) -> int:
    from ..engine.warmup import compile_all

    if args.workers is not None and args.workers < 1:
        raise ScenarioError("--workers", f"must be at least 1, got {args.workers}")
    count, seconds = compile_all(args.workers)
    print(f"{count} kernels compiled or loaded in {seconds:.0f} s: numba's cache holds them")
    return 0


@_reads_file
def _cmd_plot(args) -> int:
    _check_sweep_file(args.path)
    if args.tokens:
        if args.style != "default":
            raise ScenarioError("--style", "styles the sweep picture: use it without --tokens")
        for flag, given in (("--sel", args.sel), ("--log", args.log), ("--var", args.var), ("--hue", args.hue)):
            if given:
                raise ScenarioError(
                    flag, "draws a variable: use it without --tokens (the saved states' point is chosen with --point)"
                )
        from . import tokens

        print(f"plotted {tokens.plot(args.path, args.out, args.point, args.time, args.run)}")
        return 0
    for flag, given in (("--point", args.point), ("--time", args.time is not None), ("--run", args.run != 0)):
        if given:
            hint = "; to slice the variable use --sel AXIS=VALUE" if flag == "--point" else ""
            raise ScenarioError(flag, f"chooses saved states: use it with --tokens{hint}")
    from .plot import plot

    drawn = plot(args.path, args.out, args.var, args.style, args.sel, args.log, args.hue, args.trust_model)
    print(f"plotted {drawn}")
    return 0


@_reads_file
def _cmd_animate(args) -> int:
    _check_sweep_file(args.path)
    from . import tokens

    print(f"wrote {tokens.animate(args.path, args.out, args.point, args.run, args.fps)}")
    return 0


@_reads_file
def _cmd_compare(args) -> int:
    _check_sweep_file(args.path)
    from . import comparison

    for flag, given, what in (
        ("--style", args.style != "default", "styles"),
        ("--out", args.out is not None, "names the picture of"),
    ):
        if given and not args.against:  # every option checked before anything is printed
            raise ScenarioError(flag, f"{what} the error curve: give --against too")
    if args.against:  # a picture it cannot write is refused before the comparison
        from .styles import output_path

        beside = Path(str(Path(args.path).with_suffix("")) + f"_compare_{args.along or 'exact'}.png")
        out = output_path(beside, args.out, args.style)
    result = comparison.select(_compared(args), args.statistic)
    rates = comparison.rate_lines(result, args.against) if args.against else []
    if args.observable:
        from .bias import table

        print(table(result))
    else:
        print(result["error"].to_dataframe().to_string())
    if args.against:
        print("\n".join(rates))
        print(f"plotted {comparison.plot(result, args.against, out, args.style)}")
    return 0


def _compared(args):
    """`dyn compare`'s Dataset: along an axis, or each run against the model's reference."""
    from . import comparison

    if args.observable is not None or args.reference_at:
        return _bias(args)
    if args.along is None:
        if args.reference != "exact":
            raise ScenarioError(
                "--along",
                "name the sweep axis compared (or --reference exact for the model's reference from each run's start)",
            )
        from .exact import compare_exact

        return compare_exact(args.path, at=args.at, trust_model=args.trust_model)
    return comparison.compare(args.path, args.along, args.reference, at=args.at, trust_model=args.trust_model)


def _bias(args):
    """`dyn compare --observable`: the weak error of an output (:mod:`dyn.presentation.bias`);
    the options of the distance (--at, --statistic) are refused, not ignored."""
    from .bias import compare_bias, parse_at

    if args.observable is None:
        raise ScenarioError("--reference-at", "places the reference of a bias: give --observable too")
    for flag, given in (("--at", args.at != "all"), ("--statistic", args.statistic != "error")):
        if given:
            raise ScenarioError(flag, "chooses a distance between paths: use it without --observable")
    if args.along is None:
        raise ScenarioError("--along", "name the sweep axis of the bias (e.g. dt)")
    return compare_bias(args.path, args.along, args.reference, args.observable, parse_at(args.reference_at))


def _cmd_describe(args) -> int:
    from .describe import describe

    print(describe(args.name))
    return 0


def _description(name: str) -> str:
    """A system's description; an installed package's is loaded in a process of its own
    (:mod:`dyn.user.isolated`: one that raises or exits while loading is listed as broken, with
    why, and the listing goes on)."""
    from .. import systems
    from ..user import isolated, locate

    if locate.is_import_path(name) or systems.is_own(name):
        try:
            return systems.get(name).description
        except ScenarioError as exc:
            return f"(cannot be loaded: {exc.problem})"
    text, why = isolated.description(name)
    return text if not why else f"(broken: cannot be loaded: {why})"


def _hidden_entry_points() -> list[str]:
    """Lines for installed packages' entry points named like one of the package's systems:
    never loaded (a scenario naming it runs the package's own), said rather than ignored."""
    from .. import systems
    from ..user import locate

    return [
        f"  {name:<20} (an installed package's entry point {name} = {ep.value} is not used: "
        "a shipped system has this name)"
        for name, ep in sorted(locate.entry_points().items())
        if systems.is_own(name)
    ]


def _cmd_list(args) -> int:
    if getattr(args, "name", None):
        return _cmd_describe(args)
    import tomllib

    from .describe import listed_systems

    print("systems:")
    for name in listed_systems():
        print(f"  {name:<20} {_description(name)}")
    for line in _hidden_entry_points():
        print(line)
    print(f"scenarios ({SCENARIO_DIR}):")
    for path in sorted(SCENARIO_DIR.glob("*.toml")):
        head = tomllib.loads(path.read_text()).get("scenario", {})
        print(f"  {path.stem:<28} {head.get('description', '')}")
    print("`dyn list SYSTEM` says what a system takes (parameters) and gives (outputs)")
    return 0


_STARTING: list = []  # [True] while this process's command imports with the collector off


def _as_the_process() -> None:
    """The garbage collector of a process that runs one command and exits (``dyn``,
    ``python -m dyn``; never a caller's process, which calls :func:`main` with its arguments):
    off while the command imports its libraries (numpy, numba, h5py: hundreds of thousands of
    objects, none of them garbage, walked again by every full collection), on again from
    :func:`_collecting`, and at exit every object frozen: the interpreter's last collections
    walked all of numba's and LLVM's objects, about a quarter of a short ``dyn run``. Objects
    are still freed at exit as their references go; what the collector alone would free then
    (cycles) is left to the operating system, as after any crash."""
    gc.disable()
    _STARTING.append(True)
    atexit.register(gc.freeze)


def _collecting() -> None:
    """The collector on again after the command's imports (see :func:`_as_the_process`), with
    the objects the imports made frozen: modules and their functions live until exit anyway,
    and the run's own collections then walk only what the run makes."""
    if _STARTING:
        _STARTING.clear()
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    if argv is not None:  # a caller's process: the command, and back to the caller
        return _command(argv, [])
    _as_the_process()  # the process's own command line
    ran: list[str] = []
    code = _command(None, ran)
    if ran == ["run"]:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """End the process of a finished ``dyn run`` (its own command line) with `code`, skipping
    the interpreter's finalization once nothing is left for it to do: it would tear down
    numba's and LLVM's objects module by module, about 5% of a short run. Not when a thread
    the interpreter would wait for still runs, or an HDF5 file is still open (the library's own
    exit handler closes it); otherwise the exit handlers run, the standard streams are flushed,
    and the process ends with `code` (a stream that cannot be flushed leaves the exit to the
    interpreter, which says so as at any exit)."""
    import os
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    h5py = sys.modules.get("h5py")
    if h5py is not None and h5py.h5f.get_obj_count(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE):
        return
    run_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's: runs them, then forgets
    if run_handlers is None:
        return
    run_handlers()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # a closed pipe, a closed stream
        return
    os._exit(code)


def _refuse_unprintable_names(args) -> None:
    """A file name holding a line break or another control character is refused in one line,
    its characters escaped: every message naming it would otherwise split or hide it."""
    from ..core.errors import printable

    for flag in ("path", "scenario", "out"):
        name = getattr(args, flag, None)
        if isinstance(name, str) and not name.isprintable():
            raise ScenarioError(
                "" if flag in ("path", "scenario") else "--out",
                f"the file name '{printable(name)}' holds a control character (a line break?): rename the file",
            )


def _command(argv: list[str] | None, ran: list[str]) -> int:
    """The command of `argv` (the process's own arguments when None); its name goes in `ran`
    when its handler returned (an error handled here, or an exception, leaves `ran` empty)."""
    from ..engine.interrupts import exit_status, stop_on_signals

    try:
        with stop_on_signals():  # SIGTERM and SIGHUP stop a run as Ctrl-C does, from the start
            args = _parser().parse_args(argv)
            handler = {
                "run": _cmd_run,
                "show": _cmd_show,
                "plot": _cmd_plot,
                "list": _cmd_list,
                "compare": _cmd_compare,
                "animate": _cmd_animate,
                "compile": _cmd_compile,
                "describe": _cmd_describe,
            }[args.command]
            if handler is not _cmd_run:  # `run` collects again once its libraries are imported
                _collecting()
            _refuse_unprintable_names(args)
            code = handler(args)
        ran.append(args.command)
        return code
    except UserExit as exc:  # user code ended the run: 1 once points ran, 2 before
        print(f"dyn: error: {exc}", file=sys.stderr)
        return 1 if exc.during_points else 2
    except ScenarioError as exc:
        print(f"dyn: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        name = getattr(exc, "name", "SIGINT")
        print(f"dyn: interrupted ({name}); run the same command again to resume", file=sys.stderr)
        return exit_status(exc)
    except BrokenPipeError:  # e.g. `dyn list | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
    except OSError as exc:  # the system refused (a full disk, a lost mount): one line too
        from ..core.errors import one_line

        print(f"dyn: error: {one_line(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
