"""Every call starts from a clean rank that sees the caller's current state.

Each test fails with ranks kept warm across calls (the launcher before the zygote): their
dtype, RNG and environment leaked into the next call, and they never saw an environment
variable, working directory or reloaded module the caller changed after the first call.
"""

import importlib
import os
import sys

import pytest

from minipar.runtime.launch import run

pytestmark = pytest.mark.slow


def _leave_state_behind(rank, world_size):
    import os

    import torch

    torch.set_default_dtype(torch.float64)
    torch.manual_seed(1234)
    os.environ["MINIPAR_LEFT_BEHIND"] = "yes"
    sys.modules["minipar_left_behind"] = object()
    return torch.rand(2)


def _look_at_state(rank, world_size):
    import os

    import torch

    return dict(
        dtype=torch.get_default_dtype(),
        seed=torch.initial_seed(),
        env="MINIPAR_LEFT_BEHIND" in os.environ,
        module="minipar_left_behind" in sys.modules,
        draw=torch.rand(2),
    )


def test_state_of_one_call_is_gone_in_the_next():
    seeded = run(_leave_state_behind, 2, backend="gloo")
    assert seeded[0].dtype == __import__("torch").float64  # the setting did take effect
    first, again = run(_look_at_state, 2, backend="gloo"), run(_look_at_state, 2, backend="gloo")
    for a, b in zip(first, again):
        assert a["dtype"] == __import__("torch").float32
        assert a["seed"] != 1234 and not a["env"] and not a["module"]
        # a fresh process draws the same numbers every call (the RNG did not move on)
        assert a["draw"].tolist() == b["draw"].tolist()
    # negative control: within one call, the state set earlier is visible (the check can fail)
    both = run(lambda r, w: (_leave_state_behind(r, w), _look_at_state(r, w))[1], 2, backend="gloo")
    assert all(s["env"] and s["seed"] == 1234 for s in both)


def test_caller_state_set_after_the_first_call_reaches_the_ranks(tmp_path, monkeypatch):
    run(lambda r, w: None, 2, backend="gloo")  # the launcher is warm before the changes
    (tmp_path / "minipar_caller_mod.py").write_text("VALUE = 'from the caller path'\n")
    monkeypatch.setenv("MINIPAR_CALLER_VAR", "set after the first call")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def look(rank, world_size):
        import os

        import minipar_caller_mod

        return os.environ.get("MINIPAR_CALLER_VAR"), os.getcwd(), minipar_caller_mod.VALUE

    seen = run(look, 2, backend="gloo")
    assert seen == [("set after the first call", str(tmp_path), "from the caller path")] * 2
    monkeypatch.delenv("MINIPAR_CALLER_VAR")
    assert run(lambda r, w: os.environ.get("MINIPAR_CALLER_VAR"), 1, backend="gloo") == [None]


def test_an_edited_and_reloaded_module_runs_its_new_code(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    src = tmp_path / "minipar_edited_mod.py"
    src.write_text("def answer(rank, world_size):\n    return 'old'\n")
    mod = importlib.import_module("minipar_edited_mod")
    assert run(mod.answer, 2, backend="gloo") == ["old", "old"]
    src.write_text("def answer(rank, world_size):\n    return 'new code'\n")
    importlib.invalidate_caches()
    mod = importlib.reload(mod)
    assert mod.answer(0, 1) == "new code"
    assert run(mod.answer, 2, backend="gloo") == ["new code", "new code"]
