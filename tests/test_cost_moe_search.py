"""The planner's default search over expert parallelism: an MoE model searches ep over the powers
of two that divide its experts and the t·cp·d ranks of a stage without being asked (``--max-ep``
left out), a dense model keeps ep = 1, and the search stays bounded. Each test names the bug it
catches."""

import pytest

from minipar.cost.planner import three_d as planner

DSV3 = planner.MODELS["deepseek-v3"]
GPT3 = planner.MODELS["gpt3-175b"]


def test_default_ep_limit_is_the_experts_for_moe_and_1_for_dense():
    """Catches: the default left at 1 (DeepSeek-V3 planned without EP unless --max-ep is given),
    or a dense model given an ep range."""
    assert planner.ep_limit(DSV3, planner.Space()) == DSV3.experts == 256
    assert planner.ep_limit(GPT3, planner.Space()) == 1
    assert planner.ep_limit(DSV3, planner.Space(max_ep=8)) == 8


def test_deepseek_v3_on_2048_h800_searches_ep_by_default():
    """DeepSeek-V3 on 2048 H800, B = 15360: the default search ranks layouts with EP first, the
    same first choice as an explicit ep range up to the experts, and several times faster than
    the best layout without EP; at most 9 ep values (1 to 256) times the ep = 1 layouts are
    priced, so the search stays bounded. Catches: the default search leaving EP out (243 s a
    step at ep = 1, ZeRO-3, t = 8), or trying ep values that cannot fold."""
    cl = planner.cluster(2048, 8, "H800")
    every = planner.search(DSV3, cl, 15360)
    found = [c for c in every if c.fits]
    wide = [c for c in planner.search(DSV3, cl, 15360, planner.Space(max_ep=256)) if c.fits]
    every_flat = planner.search(DSV3, cl, 15360, planner.Space(max_ep=1))
    flat = [c for c in every_flat if c.fits]
    assert len(every_flat) < len(every) <= 9 * len(every_flat)
    assert found[0].ep > 1
    assert found[0].layout == wide[0].layout
    assert {c.ep for c in found} >= {1, 2, 4, 8, 16, 32, 64, 128, 256}
    assert found[0].step_seconds < flat[0].step_seconds / 4


def test_searched_ep_folds_onto_the_grid_without_refusals():
    """On 24 GPUs (t·cp·d = 24 at p = 1) ep 16, 32 ... do not divide a stage's ranks: the default
    search skips them quietly and every layout it returns has ep dividing the experts and
    t·cp·d. Catches: ep tried past what folds (a refusal per layout, or a layout EDP cannot
    hold)."""
    m = planner.MODELS["mixtral-8x7b"]
    refused: list[str] = []
    found = planner.search(m, planner.cluster(24, 8, "H100-SXM"), 48, refusals=refused)
    assert found and {c.ep for c in found} == {1, 2, 4, 8}
    for c in found:
        assert m.experts % c.ep == 0 and (c.tp * c.cp * c.dp) % c.ep == 0
    assert not [r for r in refused if "ep" in r], refused[:3]


@pytest.mark.parametrize("gpu", ["H800", "B200", "GB200-NVL72"])
def test_plan_without_max_ep_searches_ep(capsys, gpu):
    """`minipar plan --model deepseek-v3 --gpu G --gpus 2048 --global-batch 15360`, no --max-ep:
    layouts with EP rank among the fitting ones; with --max-ep 1 none. Catches: the flag's
    default left at 1."""
    from test_cli_cost import run_json

    argv = ["plan", "--model", "deepseek-v3", "--gpu", gpu, "--gpus", "2048"]
    argv += ["--global-batch", "15360", "--top", "0"]
    out = run_json(capsys, *argv)
    flat = run_json(capsys, *argv, "--max-ep", "1")
    assert any(c["ep"] > 1 for c in out["configs"] if c["fits"])
    assert {c["ep"] for c in flat["configs"]} == {1}
