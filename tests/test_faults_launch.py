"""Faults: a launch signalled while its zygote starts or while its ranks and their own
children run (SIGINT, SIGTERM, SIGHUP, SIGKILL to the caller) leaves no process and no
folder behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fault_support import _settled, _tagged, _wait_for

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


# ----------------------------------------------------------------------------- a launch
LAUNCH = textwrap.dedent("""
    import os, subprocess, sys, time
    from minipar.runtime.launch import run

    def sleeper(rank, world_size, marker):
        child = subprocess.Popen(["sleep", "600"])
        open(f"{marker}.{rank}", "w").write(str(child.pid))
        time.sleep(600)

    run(sleeper, 2, os.environ["MINIPAR_FAULT_MARKER"], backend="gloo", timeout=900)
""")


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS + [signal.SIGKILL], ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("when", ["starting", "running"])
def test_a_signalled_launch_leaves_no_rank_child_or_folder(sandbox, sig, when):
    env, tmp, side, tag = sandbox
    p = subprocess.Popen(
        [sys.executable, "-c", LAUNCH],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if when == "starting":  # the zygote exists and is importing torch: no rank yet
        # (a SIGKILL between the caller's mkdir and the zygote's start leaves a folder that the
        # next launch removes: its name carries the dead caller's pid)
        _wait_for(
            lambda: (
                (
                    any(n.name.startswith("minipar-") for n in tmp.iterdir())
                    and any(pid != p.pid for pid in _tagged(tag))
                )
                or p.poll() is not None
            ),
            120,
            "the zygote",
        )
    else:
        markers = [side / "rank.0", side / "rank.1"]
        _wait_for(
            lambda: all(m.exists() and m.read_text() for m in markers) or p.poll() is not None,
            240,
            "both ranks and their children",
        )
    assert p.poll() is None, p.communicate()[1][-3000:]
    p.send_signal(sig)
    p.communicate(timeout=60)
    # the zygote finishes its import first; torch's compile cache (torchinductor_<user>) stays
    procs, files = _settled(tag, tmp, seconds=300, ignore="torchinductor")  # done when empty
    assert procs == [], f"processes left: {procs}"
    assert files == [], f"files left in TMPDIR: {files}"
