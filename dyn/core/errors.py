"""Errors a user can fix: each carries the offending key so the CLI prints one clear line."""

MAX_MESSAGE = 400  # characters of a problem text shown: a 100 kB --set value is not echoed whole


class ScenarioError(ValueError):
    """Bad user input: a malformed file, an unknown key, a wrong type or an out-of-range value.

    ``key`` is the dotted path of the offending entry (``"params.beta"``), or ``""`` when the
    problem concerns the file as a whole. The CLI turns this into one line and exit status 2.
    The problem text is made one line (library texts, e.g. HDF5's, embed newlines) and cut to
    MAX_MESSAGE characters.
    """

    def __init__(self, key: str, problem: str):
        self.key = key
        self.problem = one_line(problem)
        shown = one_line(printable(key), 80)
        super().__init__(f"{shown}: {self.problem}" if key else self.problem)

    def __reduce__(self):  # raised in a pool worker, it crosses back pickled: keep key and text
        return type(self), (self.key, self.problem)


def printable(text: str) -> str:
    """`text` with control and other unprintable characters escaped, so a message stays one line."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` on one line: line breaks become " / ", other control characters are escaped, and
    what exceeds `limit` characters is cut with a note of how much was left out."""
    text = " / ".join(part.strip() for part in str(text).splitlines() if part.strip())
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters cut)"
    return text


def short_repr(value, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters: for echoing user values in messages."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


class OutputError(ScenarioError):
    """The output file cannot be used: it belongs to another scenario, or another run holds it."""


class RunAborted(ScenarioError):
    """The run cannot go on (a worker process died, the disk is full): one line, exit status 2;
    finished points are kept and the same command resumes."""


class UserExit(RunAborted):
    """User code called sys.exit (or os._exit in a pool worker) while running a hook: the run
    ends (one line; exit status 2 at import, 1 during points), finished points are kept."""

    def __init__(self, key: str, problem: str, during_points: bool = True):
        super().__init__(key, problem)
        self.during_points = during_points

    def __reduce__(self):  # crosses back from a pool worker pickled
        return type(self), (self.key, self.problem, self.during_points)


class MissingFile(ScenarioError, FileNotFoundError):
    """A file the user named does not exist: a ScenarioError (one line, exit status 2 on the
    command line) that Python code catches as the FileNotFoundError it expects."""


def did_you_mean(name: str, known) -> str:
    """ " (did you mean 'a', 'b' or 'c'?)" for the (at most 3) names of `known` nearest `name`,
    nearest first (difflib's ratio of at least 0.6, as a misspelling or a missing letter gives);
    "" when none is near."""
    import difflib

    near = [repr(n) for n in difflib.get_close_matches(str(name), [str(k) for k in known], n=3, cutoff=0.6)]
    if not near:
        return ""
    listed = near[0] if len(near) == 1 else f"{', '.join(near[:-1])} or {near[-1]}"
    return f" (did you mean {listed}?)"
