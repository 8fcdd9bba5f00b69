"""``minipar`` on a plain terminal: an ASCII-only one (``PYTHONIOENCODING=ascii``) gets the
tables and help with their symbols spelled out, and a Ctrl-C while the commands are still
being imported is one line and status 130, not a 20-line traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PLAN = ["plan", "--model", "gpt3-175b", "--gpus", "1024", "--global-batch", "1536", "--top", "1"]


def _minipar(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "minipar.cli", *argv],
        capture_output=True,
        timeout=120,
        env=dict(os.environ, **env),
    )


@pytest.mark.slow
@pytest.mark.parametrize("argv", [PLAN, ["plan", "--help"], ["--help"]])
def test_an_ascii_terminal_gets_the_output_spelled_out(argv):
    r = _minipar(*argv, PYTHONIOENCODING="ascii")
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    out = r.stdout.decode("ascii")  # raises if a byte is not ASCII
    assert "Traceback" not in r.stderr.decode("ascii")
    if argv == PLAN:
        assert "1024 x A100-80GB (eta = 0.725 of 312 TFLOP/s)" in out, out


# A finder that sends this process SIGINT when ``minipar.cost.cli`` is about to be imported:
# in the middle of ``minipar.cli``'s imports, where a newcomer's early Ctrl-C landed.
EARLY_CTRL_C = textwrap.dedent("""
    import importlib.abc, os, signal, sys

    class Trip(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "minipar.cost.cli":
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, Trip())
    sys.argv = ["minipar", "plan", "--help"]
    from minipar.cli import main
    print("imported")  # never reached: the signal stopped the import
    sys.exit(main())
""")


@pytest.mark.slow
def test_ctrl_c_while_the_commands_import_is_one_line():
    r = subprocess.run(
        [sys.executable, "-c", EARLY_CTRL_C], capture_output=True, text=True, timeout=120
    )
    assert (r.returncode, r.stdout) == (130, ""), (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.stderr == "minipar: stopped by SIGINT\n", r.stderr[-2000:]


def test_importing_the_cli_leaves_the_callers_signal_handlers_as_they_were():
    """The early handlers last only while ``minipar.cli`` imports (a test runner, a notebook
    keep their Ctrl-C)."""
    import signal

    import minipar.cli

    assert signal.getsignal(signal.SIGINT) is not minipar.cli._stopped_early


def test_help_shows_no_markup_and_plan_names_every_dimension(capsys):
    """`minipar --help` printed "The ``minipar`` console script."; `plan --help` said only
    data × tensor × pipeline though the search covers cp and ep too."""
    from minipar.cli import main

    for argv, words in ((["--help"], "minipar COMMAND --help"), (["plan", "--help"], "--max-ep")):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "``" not in out and ":func:" not in out and words in out, out
    main_help = out.split("options:")[0]
    assert "context and expert parallelism" in " ".join(main_help.split())
