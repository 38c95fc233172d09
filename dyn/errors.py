"""Errors a user can fix: each carries the offending key so the CLI prints one clear line."""


class ScenarioError(ValueError):
    """Bad user input: a malformed file, an unknown key, a wrong type or an out-of-range value.

    ``key`` is the dotted path of the offending entry (``"params.beta"``), or ``""`` when the
    problem concerns the file as a whole. The CLI turns this into one line and exit status 2.
    """

    def __init__(self, key: str, problem: str):
        self.key = key
        self.problem = problem
        shown = printable(key)
        super().__init__(f"{shown}: {problem}" if key else problem)


def printable(text: str) -> str:
    """`text` with control and other unprintable characters escaped, so a message stays one line."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


class OutputError(ScenarioError):
    """The output file cannot be used: it belongs to another scenario, or another run holds it."""
