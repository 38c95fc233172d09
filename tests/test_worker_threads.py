"""A sweep's pool worker takes its share of the cores whether or not numba was imported before
its initializer ran: by NUMBA_NUM_THREADS before the import, by numba.set_num_threads after it
(where a changed variable would make numba's next compile fail once its threads run)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys


def _after_numba(threads: int) -> tuple[int, str]:
    import numba

    numba.get_num_threads()  # numba's threads are launched at their configured count

    from dyn.engine.lifetime import init_worker

    init_worker(threads)

    @numba.njit
    def twice(x):  # a fresh compile: numba reloads its configuration from the environment
        return 2 * x

    twice(1.0)
    return numba.get_num_threads(), __import__("os").environ.get("NUMBA_NUM_THREADS", "")


def test_a_worker_that_imported_numba_first_takes_its_share_and_still_compiles():
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        count, variable = pool.apply(_after_numba, (1,))
    assert count == 1
    assert variable == ""  # left as numba read it (unset in this spawned child)


def test_the_initializers_module_leaves_numba_unimported():
    """A pool's spawned worker imports the initializer's module first: it must not import numba,
    so that the thread count goes through numba's own variable."""
    code = (
        "import sys, dyn.engine.lifetime as m; m.init_worker(1); import os; "
        "print('numba' in sys.modules, os.environ['NUMBA_NUM_THREADS'])"
    )
    env_free = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_free, check=True)
    assert done.stdout.split() == ["False", "1"]
