"""One note for a run that will take long: the dry-run's model of time (dyn/engine/estimate.py:
seconds per run of a measured point, times the runs of every point left) applied to the points
the run itself has finished, once a rate is measured.

The first point holds the start (compiling, a pool's workers starting), so the rate is taken
from the points after it: seconds between the first point's end and the latest point's end,
per point. The estimate, over NOTE_SECONDS, is said once, as a `dyn: note:` line; the run goes
on (Ctrl-C stops it, and the same command resumes it).
"""

from __future__ import annotations

import time

NOTE_SECONDS = 3600.0  # a run estimated past this gets the note
MEASURED = 2  # points after the first that make the rate


class LongRunNote:
    """Fed each finished point (:meth:`done`); says the estimate once when it passes
    NOTE_SECONDS. `words`: seconds in words (:func:`duration_text`)."""

    def __init__(self, total: int, log, words=lambda s: f"{s:.0f} s", clock=time.monotonic):
        self.total, self.log, self.words, self.clock = total, log, words, clock
        self.finished, self.first, self.said = 0, None, False

    def done(self) -> None:
        self.finished += 1
        now = self.clock()
        if self.finished == 1:
            self.first = now
            return
        if self.said or self.finished < 1 + MEASURED:
            return
        self.said = True  # measured once: a rate that drifts later is the progress bar's
        per_point = (now - self.first) / (self.finished - 1)
        left = per_point * (self.total - self.finished)
        if left > NOTE_SECONDS:
            print(
                f"dyn: note: this run will take about {self.words(left)} more "
                f"({self.total - self.finished} points left at {per_point:.3g} s each, as "
                "measured); Ctrl-C stops it and the same command resumes it",
                file=self.log,
                flush=True,
            )


def duration_text(seconds: float) -> str:
    """Seconds for people: 45 s, 12 min, 2.5 h."""
    seconds = int(round(seconds))
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
