"""A stop signal is raised in the main thread at once, except while llvmlite's code is on the
stack (LLVM calling back into Python through ctypes, where an exception is dropped and LLVM
then reads a half-made buffer): there it waits for the retry timer's next tick after the stack
has left llvmlite."""

import inspect
import signal
import time

import pytest

from dyn.engine import interrupts

# code whose frames belong to a module named like llvmlite's (as a ctypes callback of
# llvmlite.binding's is): it receives a SIGINT and counts on past it
UNDER_LLVMLITE = """
def callback(work):
    signal.raise_signal(signal.SIGINT)
    total = 0
    for i in range(work):
        total += i
    return total
"""


def _llvmlite_callback():
    scope = {"__name__": "llvmlite.binding.callback_of_a_test", "signal": signal}
    exec(compile(UNDER_LLVMLITE, "<llvmlite callback>", "exec"), scope)
    return scope["callback"]


def test_a_frame_under_llvmlite_is_recognised_and_others_are_not():
    seen = {}

    def probe():
        seen["here"] = interrupts.under_llvm(inspect.currentframe())

    scope = {"__name__": "llvmlite.binding.x", "probe": probe}
    exec("def inner():\n    probe()\n", scope)
    scope["inner"]()
    assert seen["here"] is True
    probe()
    assert seen["here"] is False


def test_a_signal_under_llvmlite_is_raised_once_the_stack_has_left_it():
    callback = _llvmlite_callback()
    returned = False
    with pytest.raises(interrupts.Interrupted) as caught, interrupts.stop_on_signals():
        # the callback runs to its end: the signal came while it was on the stack
        assert callback(100_000) == 100_000 * 99_999 // 2
        returned = True
        for _ in range(200):  # the timer ticks every RETRY_SECONDS: 50 ticks' time at most
            time.sleep(interrupts.RETRY_SECONDS / 4)
    assert returned, "the interrupt was raised inside the callback"
    assert caught.value.signum == signal.SIGINT


def test_a_signal_elsewhere_is_raised_at_once():
    ran_on = False
    with pytest.raises(interrupts.Interrupted), interrupts.stop_on_signals():
        signal.raise_signal(signal.SIGINT)
        ran_on = True
    assert not ran_on
