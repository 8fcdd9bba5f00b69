"""Faults in ``minipar bench``: a signal (SIGINT, SIGTERM, SIGHUP) while ranks run, or while the
ranks are being stopped, ends the command with one line and status 128 + N and leaves no process
and no socket folder; a rank's error or a failed allocation is one line and status 2; a
non-finite number is never printed as JSON; a long measurement says it is still measuring."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_support import _settled, _tagged, _wait_for

from minipar import cli
from minipar.bench import common
from minipar.bench import launch as bench_launch
from minipar.runtime import launch
from minipar.runtime.launch import RankError

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signalled_bench_says_one_line_and_leaves_nothing(sandbox, sig):
    env, tmp, side, tag = sandbox
    p = subprocess.Popen(
        [sys.executable, "-m", "minipar.cli", "bench", "launch", "--ranks", "2"]
        + ["--repeats", "1000000", "--backend", "gloo"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # ranks are being launched over and over: the zygote and its socket folder exist
    _wait_for(
        lambda: (
            (
                any(n.name.startswith("minipar-") for n in tmp.iterdir())
                and len([q for q in _tagged(tag) if q != p.pid]) >= 1
            )
            or p.poll() is not None
        ),
        120,
        "the zygote",
    )
    time.sleep(0.5)  # past the first call: repeat calls run
    os.kill(p.pid, sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig, (p.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    stops = [ln for ln in err.splitlines() if "stopped by" in ln]
    assert stops == [f"minipar bench: stopped by {signal.Signals(sig).name}"], err[-3000:]
    # torch's compiler cache folder (torchinductor_<user>) is made by every launch, signalled
    # or not: torch's to keep, not the launcher's
    procs, files = _settled(tag, tmp, ignore="torchinductor_")
    assert procs == [] and files == [], (procs, files)


def test_a_signal_while_the_ranks_are_stopped_waits_for_the_cleanup(capsys, monkeypatch):
    """SIGTERM arriving while the launcher's zygote is being shut down (it used to arrive in
    ``atexit``, print a KeyboardInterrupt traceback and leave the socket folder): the shutdown
    finishes, then the command reports the signal."""
    done, started = [], []

    def shutdown():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, before the next line
        done.append("finished")

    def measure(*a, **k):
        started.append(object())  # the zygote this command started (stopped at its end)
        return {"ranks": 2}

    monkeypatch.setattr(launch, "shutdown", shutdown)
    monkeypatch.setattr(launch, "zygote", lambda: started[-1] if started else None)
    monkeypatch.setattr(bench_launch, "measure", measure)
    monkeypatch.setattr(bench_launch, "_show", lambda r: print("report"))
    assert cli.main(["bench", "launch", "--ranks", "2", "--backend", "gloo"]) == 128 + 15
    assert done == ["finished"]
    out = capsys.readouterr()
    assert out.out == "report\n"
    assert out.err == "minipar bench: stopped by SIGTERM\n"


@pytest.mark.slow
def test_a_command_in_process_stops_its_own_zygote_not_the_callers(monkeypatch):
    """``cli.main`` called in a process that already launched (a notebook, a test worker) leaves
    that zygote warm for the next call, even when the command fails; a zygote the command
    started itself is stopped before it returns. (It used to stop the caller's too: each test
    file that called the CLI in-process made its worker import torch again, 2 CPU-s.)"""
    launch.run(lambda r, w: r, 2, backend="gloo")
    callers = launch.zygote()
    assert callers is not None and callers.alive()
    assert cli.main(["bench", "dp", "--ranks", "1"]) == 2
    assert launch.zygote() is callers and callers.alive()

    launch.shutdown()

    def measure(*a, **k):
        launch.run(lambda r, w: r, 2, backend="gloo")
        return {"ranks": 2}

    monkeypatch.setattr(bench_launch, "measure", measure)
    monkeypatch.setattr(bench_launch, "_show", lambda r: None)
    assert cli.main(["bench", "launch", "--ranks", "2", "--backend", "gloo"]) == 0
    assert launch.zygote() is None and not callers.alive()


def test_a_signal_while_torch_is_imported_waits_for_the_import(capsys, monkeypatch, tmp_path):
    """A signal inside torch's import left a half-loaded C extension: the cleanup's next import
    failed ("cannot load module more than once per process") or the process aborted. The
    import runs with signals held; the command then stops before starting anything."""
    (tmp_path / "slow_torch.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nLOADED = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli._IMPORT_FIRST, "bench", "slow_torch")
    started = []
    monkeypatch.setattr(bench_launch, "measure", lambda *a, **k: started.append(1))
    assert cli.main(["bench", "launch", "--ranks", "2", "--backend", "gloo"]) == 128 + 15
    assert sys.modules["slow_torch"].LOADED and started == []
    assert capsys.readouterr().err == "minipar bench: stopped by SIGTERM\n"
    assert cli._IMPORT_FIRST["calibrate"] == "torch"


@pytest.mark.parametrize(
    "error, words",
    [
        (
            RankError(
                1,
                "RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
                "allocate memory: you tried to allocate 68719476736 bytes.",
                "Traceback (most recent call last):\n  File ...\nRuntimeError: ...\n",
                "a C++ message\n",
            ),
            "rank 1 raised RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: "
            "can't allocate memory: you tried to allocate 68719476736 bytes. (an allocation "
            "failed: try smaller sizes, fewer ranks or a smaller model)",
        ),
        (
            RankError(0, "ValueError: shapes differ\nsecond line", "Traceback ...\n"),
            "rank 0 raised ValueError: shapes differ",
        ),
        (RankError(2, "died (killed by signal 9 (SIGKILL))", ""), "rank 2 died (killed by"),
        (MemoryError(), "out of memory: MemoryError"),
    ],
)
def test_a_rank_error_or_a_failed_allocation_is_one_line_and_status_2(
    capsys, monkeypatch, error, words
):
    def fails(*a, **k):
        raise error

    monkeypatch.setattr(bench_launch, "measure", fails)
    assert cli.main(["bench", "launch", "--ranks", "2", "--backend", "gloo"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("minipar bench: error: "), err
    assert words in err, err


@pytest.mark.slow
def test_an_impossible_allocation_on_the_ranks_is_one_line_and_status_2():
    r = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "bench", "collectives", "--ranks", "2"]
        + ["--ops", "all-reduce", "--sizes", "1e18", "--iters", "1", "--backend", "gloo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("minipar bench: error: rank ") and "an allocation failed" in last, last


def test_a_non_finite_result_is_refused_not_printed_as_json(capsys, monkeypatch):
    monkeypatch.setattr(bench_launch, "measure", lambda *a, **k: {"repeat_to_first": float("inf")})
    assert cli.main(["bench", "launch", "--ranks", "2", "--backend", "gloo", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        "minipar bench: error: repeat_to_first (inf) is not a finite number: no JSON for it\n"
    )


def test_a_long_measurement_says_it_is_still_measuring(monkeypatch):
    """Every PROGRESS_S seconds a line on stderr, none once the block ended; a block shorter
    than the period says nothing."""
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    with common.progress("minipar bench cp"):  # 0.2 s, well inside the default period
        time.sleep(0.2)
    assert buf.getvalue() == ""
    monkeypatch.setattr(common, "PROGRESS_S", 0.01)  # the default, read when the block starts
    with common.progress("minipar bench cp"):
        _wait_for(lambda: "still measuring" in buf.getvalue(), 60, "a progress line")
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("minipar bench cp: still measuring after ")
    assert lines[0].endswith(" s")
    time.sleep(0.1)  # ten periods: the beat stopped with the block
    assert buf.getvalue().splitlines() == lines
