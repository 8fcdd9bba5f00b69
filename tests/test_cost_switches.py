"""Today's switches as explicit inputs with their era's defaults: uneven pipeline stages,
selective recomputation per module, ZeRO-1/2's parameter all-gather under the next forward,
FSDP with PP without resharding, and an allocator margin that flags rather than refuses."""

import json

import pytest

from minipar.cli import main
from minipar.cost.kernels import compute as C
from minipar.cost.planner import three_d as planner
from minipar.cost.planner import three_d_terms as T
from minipar.cost.planner.three_d_terms import stage_layers

LLAMA405 = planner.MODELS["llama3-405b"]
H100 = planner.cluster(16384, 8, "H100-SXM")
PUBLISHED = planner.Layout(2048, 8, 16, 128, 1, recompute="none", sp=True, zero=1, split="units")


def test_126_layers_on_16_stages_carry_the_embedding_and_the_head():
    """Llama 3 405B's 126 layers + embedding + head = 128 units on 16 stages: 8 layers on a
    middle stage, 7 and the embedding (or the head) on the end ones. The "even" split refuses
    it, naming the rule."""
    assert stage_layers(126, PUBLISHED) == (8, 7)
    assert planner.evaluate(LLAMA405, H100, PUBLISHED).fits
    with pytest.raises(ValueError, match=r"layers \(126\) must be divisible by p \(16\)"):
        planner.evaluate(LLAMA405, H100, planner.Layout(2048, 8, 16, 128, 1, split="even"))


def test_llama3_405b_at_its_published_8k_layout_interleaves(capsys):
    """The Llama 3 authors pre-trained 405B on 8K sequences on t = 8, cp = 1, p = 16, d = 128
    of 16,384 H100 (Llama Team 2024, §3.3.2, Table 4: 41 % MFU), with an interleaved schedule
    and without activation checkpointing. The plan at that layout ranks interleaving first
    (v = 8, one layer per chunk), with selective recomputation: with m = p = 16, Megatron's
    interleaved warm-up holds every chunk of the batch on the early stages (16 micro-batches of
    8 layers), 81.7 GiB without recomputation, over the 78 GiB limit; 1F1B without
    recomputation fits, tight. With every TP collective and the gradient reduction exposed
    (--no-tp-overlap --no-overlap-grad-reduce) the first plan runs at MFU 42-43 %, the
    authors' figure; with today's defaults (both overlapped, at their cost) at 48-49 %. The
    schedule's micro-batch group (Llama 3's N) does not bound the chunks in flight here: with
    m = p any N from p holds every chunk on the early stages. What fits without recomputation
    is an MLP that keeps less (--mlp-saves inputs, tests/test_cost_pipeline_memory.py)."""
    argv = ["plan", "--model", "llama3-405b", "--gpu", "H100-SXM", "--gpus", "16384"]
    argv += ["--global-batch", "2048", "--tp", "8", "--pp", "16", "--micro-batch", "1"]
    assert main(argv + ["--json", "--top", "0", "--no-tp-overlap", "--no-overlap-grad-reduce"]) == 0
    exposed = json.loads(capsys.readouterr().out)["configs"][0]
    assert exposed["chunks"] == 8 and 0.40 < exposed["mfu"] < 0.45
    assert main(argv + ["--json", "--top", "0"]) == 0
    configs = json.loads(capsys.readouterr().out)["configs"]
    best = configs[0]
    assert (best["pp"], best["dp"], best["split"], best["chunks"]) == (16, 128, "units", 8)
    assert best["recompute"] == "selective" and best["fits"] and 0.45 < best["mfu"] < 0.50
    none = [c for c in configs if c["recompute"] == "none" and c["fits"]]
    assert none and {c["chunks"] for c in none} == {1}
    assert all(c["bytes_per_gpu"] > c["margin_limit"] for c in none)  # tight


def test_selective_recomputation_is_per_module():
    """Under flash attention the 2021 selective recomputation (the attention core) saves
    nothing; today's default also drops the norms' outputs and the MLP's activation, and each
    module dropped costs its recomputation."""
    lay = planner.Layout(2048, 8, 16, 128, 1, recompute="selective", sp=True, split="units")
    core = planner.evaluate(LLAMA405, H100, lay, planner.Options(recompute_modules=("core_attn",)))
    none = planner.evaluate(LLAMA405, H100, planner.Layout(**{**lay.__dict__, "recompute": "none"}))
    today = planner.evaluate(LLAMA405, H100, lay)
    mlp = planner.evaluate(
        LLAMA405, H100, lay, planner.Options(recompute_modules=("core_attn", "mlp"))
    )
    assert core.activation_bytes == pytest.approx(none.activation_bytes, rel=2e-3)  # flash's lse
    assert today.activation_bytes < core.activation_bytes
    assert mlp.activation_bytes < core.activation_bytes
    assert none.seconds("compute") < today.seconds("compute") < mlp.seconds("compute")
    with pytest.raises(ValueError, match=r"recompute module \('attn'\) must be one of"):
        planner.evaluate(LLAMA405, H100, lay, planner.Options(recompute_modules=("attn",)))


def test_zero1_parameter_gather_hides_under_the_next_forward_not_the_last_backward():
    """ZeRO-1's all-gather of the updated parameters cannot run before the optimizer step: it
    is hidden under the next step's first forward (--overlap-param-gather, the modern default),
    never under the last backward. Off, reduce-scatter and gather are exposed together."""
    m, cl = planner.MODELS["llama3-8b"], planner.cluster(64, 8, "H100-SXM")
    lay = planner.Layout(256, 1, 2, 32, 1, zero=1, recompute="full")  # p > 1: after the flush
    serial = dict(overlap_grad_reduce=False)  # the reduce-scatter after the flush, exposed
    on = planner.evaluate(m, cl, lay, planner.Options(**serial))
    off = planner.evaluate(m, cl, lay, planner.Options(overlap_param_gather=False, **serial))
    assert on.dp_seconds == off.dp_seconds == off.seconds("dp_exposed")  # off: all exposed
    assert 0 < on.seconds("dp_exposed") < off.seconds("dp_exposed")
    # on: the gather's share, about 2/6 of the bytes (2 of the reduce-scatter's 4 + 2), less
    # one forward, is all that the next step's first forward cannot hide
    assert on.seconds("dp_exposed") >= 0.6 * off.dp_seconds


def test_fsdp_with_pp_gathers_once_per_step():
    """torchtitan sets reshard_after_forward = not pp: with PP the weights stay gathered over the
    micro-batches, about one all-gather and one reduce-scatter per step instead of 2-3 gathers
    per layer and micro-batch, at the price of the stage's whole 16-bit weights and gradient."""
    m, cl = planner.MODELS["llama3-70b"], planner.cluster(256, 8, "H100-SXM")
    lay = planner.Layout(256, 8, 4, 8, 1, zero=3, recompute="full", sp=True)
    keep = planner.evaluate(m, cl, lay)
    reshard = planner.evaluate(m, cl, lay, planner.Options(reshard_after_forward=True))
    m_ = lay.microbatches  # 3 gathers (2 bytes) + 1 reduce-scatter (4) per micro-batch, or 1 + 1
    ratio = m_ * (3 * 2 + 4) / (2 + 4)
    assert reshard.dp_seconds == pytest.approx(keep.dp_seconds * ratio, rel=1e-2)  # α apart
    assert keep.model_state_bytes > reshard.model_state_bytes


def test_the_allocator_margin_flags_a_layout_it_does_not_refuse():
    """The modern recipes keep a 2.5 % reserve; between it and the 12 % allocator margin a layout
    fits and is flagged tight. The 2021 recipe keeps its 10 % (a hard limit)."""
    cl = planner.cluster(1, 1, "H200")
    limit, margin = 0.975 * cl.gpu.memory_bytes, 0.88 * cl.gpu.memory_bytes
    rows = []
    for layers in range(20, 130):
        m = planner.ModelShape(layers, 2048, 16, 2048, 50304)
        c = planner.evaluate(m, cl, planner.Layout(4, 1, 1, 1, 4, recompute="none", zero=0))
        rows.append((c.bytes_per_gpu, c.fits, c.tight))
    assert all(fits == (x <= limit) for x, fits, _ in rows)
    assert all(tight == (margin < x <= limit) for x, _, tight in rows)
    assert any(tight for *_, tight in rows)


def test_megatron_refuses_moe_with_tp_but_no_sequence_parallelism():
    """Megatron-Core: MoE with tensor parallelism needs sequence parallelism; the search only
    tries sp on for it. Control: with sp the same layout is priced."""
    m, cl = planner.MODELS["mixtral-8x7b"], planner.cluster(64, 8, "H100-SXM")
    lay = planner.Layout(256, 2, 1, 32, 1, recompute="full", zero=1, ep=8)
    with pytest.raises(ValueError, match=r"MoE model with t \(2\) > 1 needs sequence parallel"):
        planner.evaluate(m, cl, lay)
    assert planner.evaluate(m, cl, planner.Layout(**{**lay.__dict__, "sp": True})).fits
    assert all(c.sp for c in planner.search(m, cl, 256, planner.Space(tp=2, max_ep=8)) if c.tp > 1)


def test_checkpoint_inside_the_unit_is_named_for_where_the_wrapper_sits(capsys):
    """`minipar plan --ac-inside-unit` (the older `--fsdp2-ac` still works): the gather count
    of ZeRO-3 under full recomputation depends on where the checkpoint wrapper sits, not on
    the FSDP version; either spelling prices the same, smaller ZeRO-3 traffic than without it."""
    argv = ["plan", "--model", "gpt3-175b", "--gpus", "768", "--gpu", "A100-80GB"]
    argv += ["--global-batch", "1536", "--zero", "3", "--tp", "1", "--pp", "1", "--top", "1"]
    argv += ["--recompute", "full", "--micro-batch", "1", "--json"]

    def step(*extra):
        assert main(argv + list(extra)) == 0
        return json.loads(capsys.readouterr().out)["configs"][0]["dp_seconds"]

    outside, inside = step(), step("--ac-inside-unit")
    assert inside == step("--fsdp2-ac") and inside < outside, (inside, outside)


# --- FP8, FlashAttention-3, compiled steps, NCCL's achieved bandwidth -------------------------


def _llama8b_terms(gpu="H100-SXM", **opt):
    m = planner.MODELS["llama3-8b"]
    cl = planner.cluster(8, 8, gpu)
    lay = planner.Layout(16, 1, 1, 8, 1, recompute="none", zero=1)
    return planner.terms(m, cl, lay, planner.Options(**opt))


def test_fp8_speeds_the_gemms_and_charges_casts_and_copies():
    bf16, fp8 = _llama8b_terms(), _llama8b_terms(fp8="delayed")
    cur = _llama8b_terms(fp8="current")
    assert fp8.values["compute"] < 0.8 * bf16.values["compute"]
    assert bf16.values["fp8_casts"] == 0 and fp8.values["fp8_casts"] > 0
    assert cur.values["fp8_casts"] > fp8.values["fp8_casts"]  # the amax pass: 6 bytes, not 4
    assert bf16.values["fp8_weights"] == 0 and fp8.values["fp8_weights"] > 0


def test_fp8_and_fa3_are_refused_before_hopper_naming_the_rule():
    with pytest.raises(ValueError, match="fp8 needs a GPU with FP8 tensor cores.*A100-80GB"):
        _llama8b_terms("A100-80GB", fp8="delayed")
    with pytest.raises(ValueError, match="attention fa3 .* is a Hopper kernel; A100-80GB is not"):
        _llama8b_terms("A100-80GB", attention="fa3")
    with pytest.raises(
        ValueError, match="fp8 .'blockwise'. must be one of delayed, current, rowwise"
    ):
        _llama8b_terms(fp8="blockwise")


def test_rowwise_casts_each_tensor_twice_at_its_own_gemm_rate():
    """Rowwise scaling: each GEMM input cast along rows in the forward (3 bytes) and again along
    columns in the backward (5), each output gradient both ways (8), each weight both ways (8);
    the GEMMs slower than tensorwise (FP8_ROWWISE_GEMM_RATIO of its rate), memory unchanged."""
    fwd, bwd = C.fp8_cast_bytes_per_token(4096, 14336, 1024, 1, scaling="rowwise")
    f_el = 2 * 4096 + 4096 + 14336
    b_el = 4096 + 2 * 1024 + 2 * 4096 + 14336
    assert (fwd, bwd) == (3 * f_el, 8 * b_el + 5 * f_el)
    assert C.fp8_weight_cast_bytes("rowwise") == 8 and C.fp8_weight_cast_bytes("current") == 4
    cur, row = _llama8b_terms(fp8="current"), _llama8b_terms(fp8="rowwise")
    assert row.values["compute"] > cur.values["compute"]
    assert row.values["fp8_weights"] == cur.values["fp8_weights"]
    assert row.values["fp8_casts"] > cur.values["fp8_casts"]


def _tp_terms(**opt):
    m = planner.MODELS["llama3-70b"]
    cl = planner.cluster(64, 8, "H100-SXM")
    lay = planner.Layout(64, 8, 1, 8, 1, recompute="selective", sp=opt.pop("sp", True), zero=1)
    return planner.terms(m, cl, lay, planner.Options(**opt)), (m, cl, lay)


def test_tp_overlap_exposes_one_chunk_and_what_the_gemms_do_not_cover():
    """tp_overlap: each layer's TP collectives in t chunks pipelined with its dense GEMMs;
    exposed = comm/t + max(0, comm·(t−1)/t − GEMM time), plus what the overlap costs the
    GEMMs (tp_overlap_cost). On by default on the H100 (the era's recipe); no effect without SP
    (both stacks overlap SP's all-gathers and reduce-scatters only)."""
    assert T.tp_overlap_exposed(8.0, 100.0, 8) == 1.0
    assert T.tp_overlap_exposed(8.0, 3.0, 8) == 1.0 + 4.0
    plain, (m, cl, lay) = _tp_terms(tp_overlap=False)
    over, _ = _tp_terms(tp_overlap=True)
    assert over.values == _tp_terms()[0].values  # the default
    comm = plain.values["tp"] / T.stage_layers(m.layers, lay)[0]
    opt = planner.Options(tp_overlap=True)
    gemm = T.layer_gemm_seconds(m, cl, lay, opt)
    assert gemm > comm  # a 70B layer's GEMMs outlast its TP traffic: one chunk left
    per_layer = over.values["tp"] / T.stage_layers(m.layers, lay)[0]
    cost = T.tp_overlap_cost(m, cl, lay, planner.plan_options(m, cl, opt))
    assert 0 < cost and per_layer == pytest.approx(comm / 8 + cost)
    assert {k: v for k, v in over.values.items() if k != "tp"} == {
        k: v for k, v in plain.values.items() if k != "tp"
    }
    no_sp, _ = _tp_terms(sp=False, tp_overlap=False)
    assert _tp_terms(sp=False, tp_overlap=True)[0].values["tp"] == no_sp.values["tp"]


def test_fa3_is_faster_than_flash_and_keeps_its_memory():
    flash, fa3 = _llama8b_terms(attention="flash"), _llama8b_terms(attention="fa3")
    assert fa3.values["compute"] < flash.values["compute"]
    assert fa3.values["activations"] == flash.values["activations"]


def test_compiled_changes_only_the_elementwise_kernels():
    """A compiled step moves COMPILED_TRAFFIC of the eager element-wise bytes at the HBM rate,
    with no issue time: the difference is exactly the element-wise kernels' difference."""
    eager, comp = _llama8b_terms(), _llama8b_terms(compiled=True)
    m, g = planner.MODELS["llama3-8b"], planner.cluster(8, 8, "H100-SXM").gpu
    rc = dict(norm=m.norm, mlp_matrices=3, rope=True, dropout=0.0, bias=False)
    k = C.elementwise_kernels(m.hidden, m.ffn_width, m.kv_width, 1, recipe=rc)
    tokens = m.seq
    diff = C.elementwise_seconds(k, tokens, g) - C.elementwise_seconds(k, tokens, g, compiled=True)
    assert eager.values["compute"] - comp.values["compute"] == pytest.approx(m.layers * diff)
    assert {n: v for n, v in eager.values.items() if n != "compute"} == {
        n: v for n, v in comp.values.items() if n != "compute"
    }


def test_moe_imbalance_slows_the_busiest_expert_rank_only_under_ep(capsys):
    """The busiest EP rank's tokens over the mean: its all-to-alls carry that many times the
    mean rows and its expert GEMMs that much more work. Controls: ep = 1 (every expert on one
    rank: the same total work) and a dense model do not move; below 1 is refused by its rule."""
    m, cl = planner.MODELS["mixtral-8x7b"], planner.cluster(64, 8, "H100-SXM")
    lay = planner.Layout(256, 1, 1, 64, 2, recompute="none", zero=3, ep=8)
    flat, busy = (
        planner.evaluate(m, cl, lay, planner.Options(moe_imbalance=x)) for x in (1.0, 1.5)
    )
    assert 1.45 < busy.seconds("ep") / flat.seconds("ep") < 1.5  # the bytes 1.5 times, not the α
    # the routed MLP's GEMMs: 2·K·matrices·f·h FLOPs per token of the 6·... of a layer
    assert 1.15 < busy.seconds("compute") / flat.seconds("compute") < 1.5
    assert busy.step_seconds > 1.25 * flat.step_seconds
    one = planner.Layout(256, 1, 1, 64, 2, recompute="full", zero=3, ep=1)
    dense = planner.MODELS["llama3-8b"]
    for model, layout in ((m, one), (dense, lay.__class__(256, 1, 1, 64, 2, zero=3))):
        a, b = (
            planner.evaluate(model, cl, layout, planner.Options(moe_imbalance=x))
            for x in (1.0, 1.5)
        )
        assert a.step_seconds == b.step_seconds
    with pytest.raises(ValueError, match=r"moe imbalance \(0\.8\) must be >= 1"):
        T.options(moe_imbalance=0.8)
    argv = ["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "256"]
    assert main([*argv, "--moe-imbalance", "0.8"]) == 2
    assert "moe imbalance (0.8) must be >= 1" in capsys.readouterr().err
    steps = []
    for x in ("1", "1.5"):
        fixed = ["--gpu", "H100-SXM", "--tp", "1", "--ep", "8", "--zero", "3", "--json"]
        assert main([*argv, *fixed, "--moe-imbalance", x]) == 0
        steps.append(json.loads(capsys.readouterr().out)["configs"][0]["step_seconds"])
    assert steps[1] > 1.25 * steps[0]


def test_fp8_params_keep_no_16_bit_copy_of_the_fp8_linears():
    """With FP8 parameters (--fp8-param-gather) the FP8 linears' weights have no 16-bit copy:
    the states fall by 2 bytes per linear weight on the rank (t = 8: the layer's dense GEMM
    weights ÷ 8, 80 layers), sharded over d·cp under ZeRO-3; time does not move. Without FP8
    GEMMs the option is refused by its rule. Negative control: off, the states are as before."""
    from minipar.cost.planner.shapes import layer_dense_gemms

    m, cl = planner.MODELS["llama3-70b"], planner.cluster(64, 8, "H100-SXM")
    lay = planner.Layout(128, 8, 1, 8, 1, recompute="none", sp=True, zero=1)
    bf16 = planner.evaluate(m, cl, lay, planner.Options(fp8="delayed"))
    fp8p = planner.evaluate(m, cl, lay, planner.Options(fp8="delayed", fp8_params=True))
    linear = 80 * sum(N * K for _, N, K in layer_dense_gemms(m, lay))
    assert bf16.model_state_bytes - fp8p.model_state_bytes == pytest.approx(2 * linear)
    assert fp8p.step_seconds == bf16.step_seconds
    z3 = planner.Layout(128, 8, 1, 8, 1, recompute="none", sp=True, zero=3)
    saved = [
        planner.evaluate(m, cl, z3, planner.Options(fp8="delayed", fp8_params=x)).bytes("states")
        for x in (False, True)
    ]
    assert saved[0] - saved[1] == pytest.approx(2 * linear / 8)
    with pytest.raises(ValueError, match=r"fp8_params \(True\) needs fp8 GEMMs"):
        planner.Options(fp8_params=True)
