"""Reading a rank's faulthandler dump: the learner's line is found in whichever thread runs it.

A SIGABRT sent to a rank's process may be handled on a gloo thread that has no Python frame;
faulthandler then lists that thread first. Before every thread was dumped, such a rank was
reported as "had finished its work" (seen under load in tests/test_grading_collectives.py).
"""

import linecache

import pytest

from minipar.grading.limits import waiting_at
from minipar.grading.reasons import dump_frames, dump_learner_line

LEARNER = "/home/learner/ring.py"
TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _dump(first_thread_frames: str) -> str:
    return (
        "Fatal Python error: Aborted\n\n"
        f"Current thread 0x00007f01 (most recent call first):\n{first_thread_frames}\n"
        "Thread 0x00007f00 (most recent call first):\n"
        f'  File "{TORCH}", line 2100 in wait\n'
        f'  File "{LEARNER}", line 9 in exchange\n'
        f'  File "{LEARNER}", line 20 in ring\n\n'
        "Extension modules: numpy.core._multiarray_umath (total: 1)\n"
    )


def setup_module():
    linecache.cache[LEARNER] = (
        0,
        None,
        [f"# line {i}\n" for i in range(1, 9)] + ["        q.wait()\n"] + ["\n"] * 30,
        LEARNER,
    )


def test_learner_frame_found_behind_a_thread_without_python_frames():
    dump = _dump("  <no Python frame>")
    assert [f[2] for f in dump_frames(dump)] == ["wait", "exchange", "ring"]
    assert dump_learner_line(dump) == "line 9 of exchange: q.wait()"
    assert waiting_at(dump) == "line 9 of exchange: q.wait() (in wait)"


def test_called_function_comes_from_the_learners_thread_not_the_first_one():
    other = f'  File "{TORCH}", line 50 in _heartbeat'  # a library thread listed first
    assert waiting_at(_dump(other)) == "line 9 of exchange: q.wait() (in wait)"


def test_no_learner_frame_in_any_thread_means_finished():
    dump = (
        "Current thread 0x1 (most recent call first):\n  <no Python frame>\n\n"
        f'Thread 0x2 (most recent call first):\n  File "{TORCH}", line 1 in barrier\n'
    )
    assert dump_frames(dump) == [] and waiting_at(dump) is None and waiting_at("") is None


def _abort_on_a_side_thread(rank, world_size):
    import signal
    import threading
    import time

    side = threading.Thread(target=time.sleep, args=(30,), daemon=True)  # no Python frame of
    side.start()  # its own, like gloo's
    signal.pthread_kill(side.ident, signal.SIGABRT)  # handled on the side thread
    learner_is_here_waiting()


def learner_is_here_waiting():
    import time

    time.sleep(30)


@pytest.mark.slow  # starts ranks: not part of make fast
def test_a_rank_aborted_on_another_thread_still_shows_the_main_threads_line():
    """The real rank set-up (minipar.runtime._rank): SIGABRT handled on a non-main thread."""
    import pytest

    from minipar.runtime.launch import RankError, run

    logs = []
    with pytest.raises(RankError):
        run(
            _abort_on_a_side_thread,
            1,
            backend="gloo",
            timeout=60,
            on_start=lambda pids, paths: logs.extend(paths),
        )
    with open(logs[0], errors="replace") as f:
        dump = f.read()
    assert "Current thread" in dump, dump[-3000:]  # the side thread handled it ...
    where = dump_learner_line(dump) or ""  # ... the main thread is shown
    assert where.split(": ")[0].split(" of ")[-1] in (
        "learner_is_here_waiting",
        "_abort_on_a_side_thread",
    ), dump[-3000:]
