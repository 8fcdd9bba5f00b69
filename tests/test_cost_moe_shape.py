"""The mixture-of-experts model shape (minipar.cost.model.decoder_counts, ModelShape's DeepSeek-V3
and Qwen3-MoE fields): each new preset's total and active parameters equal the published counts
at the precision they are published at, FLOPs per token equal DeepSeek's, the rules name the
value, and every older preset counts exactly what it counted before."""

import dataclasses

import pytest

from minipar.cost.model import decoder_counts, gqa_params, mla_params, moe_flops_per_token
from minipar.cost.planner import three_d as planner

B = 1e9

# (total, active) of every preset that existed before the MoE fields, as the planner counted them
# then (ModelShape.params, .active_params at the commit before these fields were added).
BEFORE = {
    "gpt3-175b": (174615822336, 174615822336),
    "bloom-176b": (176276574208, 176276574208),
    "mt-nlg-530b": (529600778240, 529600778240),
    "llama2-70b": (68976648192, 68976648192),
    "llama2-7b": (6738415616, 6738415616),
    "llama2-13b": (13015864320, 13015864320),
    "gpt3-5b": (5047549952, 5047549952),
    "gpt3-20b": (20256497664, 20256497664),
    "nemotron-8b": (8540135424, 8540135424),
    "nemotron-340b": (341029195776, 341029195776),
    "llama3-8b": (8030261248, 8030261248),
    "llama3-70b": (70553706496, 70553706496),
    "llama3-405b": (405853388800, 405853388800),
    "megatron-1t": (1008038707200, 1008038707200),
    "mixtral-8x7b": (46702792704, 12879925248),
    "llama3-405b-128k": (412228796416, 412228796416),
    "nemotron4-15b": (15628775424, 15628775424),
}


def published(value: float, count: float, digit: float) -> bool:
    """``count`` is the published ``value`` at its precision (``digit``: the place of its last
    digit, 1e9 for "671B", 0.1e9 for "30.5B"), rounded or cut: model cards do both (Qwen3-30B-A3B's
    3.35B active is published as "3.3B", DeepSeek-V3's 37.55B with both embeddings as "37B")."""
    return abs(count - value) <= digit / 2 or value <= count < value + digit


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_older_preset_counts_what_it_counted(name):
    m = planner.MODELS[name]
    assert (m.params, m.active_params) == BEFORE[name]
    assert not m.extended
    assert m.kv_width == (m.hidden // m.heads) * (m.kv_heads or m.heads)


def test_deepseek_v3_total_active_and_mtp():
    m = planner.MODELS["deepseek-v3"]
    c = m.counts
    # DeepSeek-V3 Technical Report (DeepSeek-AI 2024), abstract and §4.2: 671B total, 37B
    # activated per token; the released weights' README_WEIGHTS.md: main model 671B, 36.6B
    # activated including the 0.9B output head (the input embedding, a lookup, left out).
    assert m.params == c.total == 671_026_404_352
    assert published(671e9, c.total, 1e9)
    assert published(36.6e9, c.active - c.embedding, 0.1e9)
    assert published(37e9, c.active - c.embedding, 1e9)
    assert published(0.9e9, c.embedding, 0.1e9)  # the head (= the embedding's size)
    # README_WEIGHTS.md: the MTP module has 11.5B unique parameters and 1.5B activated (with
    # the 0.9B head). Those two figures leave out the module's 2h x h projection M_k (report
    # §2.2, Eq. 21), 0.10B, which is counted here: without it they round to the README's.
    assert c.mtp_projection == 2 * 7168 * 7168
    assert published(11.5e9, c.mtp_total - c.mtp_projection, 0.1e9)
    assert published(1.5e9, c.mtp_active - c.mtp_projection, 0.1e9)
    assert m.node_limit == 4 and m.shared_experts == 1 and m.dense_layers == 3


def test_mla_weights_of_one_deepseek_v3_layer():
    # q: 7168x1536 + 1536 (norm) + 1536x128x192; kv: 7168x576 + 512 (norm) + 512x128x256;
    # out: 128x128x7168 (DeepSeek-V3 config.json: q_lora_rank 1536, kv_lora_rank 512,
    # qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, 128 heads)
    q = 7168 * 1536 + 1536 + 1536 * 128 * 192
    kv = 7168 * 576 + 512 + 512 * 128 * 256
    assert mla_params(7168, 128, 1536, 512, 64, 128, 128) == q + kv + 128 * 128 * 7168
    # without a query compression (DeepSeek-V2-Lite) one h x a(nope + rope) projection
    assert mla_params(2048, 16, 0, 512, 64, 128, 128) == (
        2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    )


@pytest.mark.parametrize(
    ("name", "total", "t_digit", "active", "a_digit"),
    [
        # Qwen3-235B-A22B model card: "235B in total and 22B activated", 234B non-embedding
        ("qwen3-235b-a22b", 235e9, 1e9, 22e9, 1e9),
        # Qwen3-30B-A3B model card: "30.5B in total and 3.3B activated", 29.9B non-embedding
        ("qwen3-30b-a3b", 30.5e9, 0.1e9, 3.3e9, 0.1e9),
        # Mistral AI, Mixtral 8x22B announcement: 141B parameters, 39B active
        ("mixtral-8x22b", 141e9, 1e9, 39e9, 1e9),
        # Jiang et al. 2024 (Mixtral of Experts) and its model card: 46.7B total, 12.9B active
        ("mixtral-8x7b", 46.7e9, 0.1e9, 12.9e9, 0.1e9),
    ],
)
def test_published_totals_and_actives(name, total, t_digit, active, a_digit):
    m = planner.MODELS[name]
    assert published(total, m.params, t_digit), m.params
    assert published(active, m.active_params, a_digit), m.active_params


def test_qwen3_non_embedding_counts_and_head_width():
    for name, value in (("qwen3-235b-a22b", 234e9), ("qwen3-30b-a3b", 29.9e9)):
        m = planner.MODELS[name]
        digit = 1e9 if value > 100e9 else 0.1e9
        assert published(value, m.params - 2 * m.counts.embedding, digit), name
    # Qwen3-30B-A3B: 32 heads of width 128 on h = 2048 (not h/a = 64), QK-norm of 2 x 128
    m = planner.MODELS["qwen3-30b-a3b"]
    assert m.kv_width == 4 * 128
    assert gqa_params(2048, 32, 4, 128, qk_norm=True) == 2 * 2048 * 4096 + 2 * 2048 * 512 + 256


@pytest.mark.parametrize("name", ["mixtral-8x7b", "mixtral-8x22b"])
def test_decoder_counts_agree_with_the_older_formula(name):
    """Mixtral sets none of the new fields: ModelShape counts it the old way, and
    decoder_counts (the new formula) gives the same integers."""
    m = planner.MODELS[name]
    c = decoder_counts(m)
    assert (c.total, c.active) == (m.params, m.active_params)
    assert c.mtp_total == c.mtp_active == 0


def test_deepseek_v3_flops_per_token():
    """Zhao et al. 2025 ("Insights into DeepSeek-V3", Table 2): 250 GFLOPs per token for
    DeepSeek-V3 at sequence length 4096 (training, the MTP module not counted)."""
    m = planner.MODELS["deepseek-v3"]
    assert m.seq == 4096
    flops = moe_flops_per_token(m, mtp=False)
    assert published(250e9, flops, 1e9), flops
    # the MTP module adds its matrices, the shared head and one layer's attention
    extra = moe_flops_per_token(m) - flops
    assert extra == pytest.approx(6 * m.counts.mtp_active + 6 * 4096 * 128 * 320 / 2)
    # a dense Llama: 6 x (parameters - input embedding) + causal attention
    ll = planner.MODELS["llama3-8b"]
    attention = 6 * 32 * 8192 * 32 * 256 / 2
    assert moe_flops_per_token(ll) == pytest.approx(6 * (ll.params - 128256 * 4096) + attention)


def _shape(**kw):
    return dataclasses.replace(planner.MODELS["deepseek-v3"], **kw)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(dense_layers=61), r"dense layers \(61\) must be < layers \(61\)"),
        (dict(node_limit=9), r"node limit \(9\) must be <= top_k \(8\)"),
        (dict(shared_experts=-1), r"shared_experts \(-1\) must be an integer >= 0"),
        (dict(qk_rope_dim=0), r"latent attention \(kv_lora 512\) needs qk_rope_dim > 0"),
        (dict(kv_lora=0), r"q_lora \(1536\) needs multi-head latent attention: kv_lora > 0"),
        (dict(head_dim=128), "head_dim and qk_norm describe grouped-query attention, not MLA"),
        (dict(experts=1, top_k=1), r"shared_experts needs an MoE model \(experts > 1\), got 1"),
        (dict(norm="layernorm"), r"Llama recipe only .* got norm 'layernorm'"),
    ],
)
def test_shape_rules_name_the_value(change, message):
    with pytest.raises(ValueError, match=message):
        _shape(**change).check()


def test_plan_runs_deepseek_v3_on_h800(capsys):
    """`minipar plan --model deepseek-v3 --gpu H800 --gpus 2048` ranks layouts (its experts
    priced as the planner prices MoE today: routed-expert GEMMs and EP all-to-alls)."""
    from test_cli_cost import run_json

    out = run_json(
        capsys,
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "H800",
        "--gpus",
        "2048",
        "--global-batch",
        "15360",
        "--max-ep",
        "64",
    )
    assert out["params"] == 671_026_404_352 and out["gpu"] == "H800"
    assert out["intra"] == "nvlink4-h800" and out["inter"] == "ib-ndr400"
    fits = [c for c in out["configs"] if c["fits"]]
    assert len(fits) > 1 and any(c["ep"] > 1 for c in fits)
    steps = [c["step_seconds"] for c in fits]
    assert steps == sorted(steps)
