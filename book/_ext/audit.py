"""The audit of the three source articles: one row per claim, the only place a verdict is given.

``CLAIMS`` is the data; :func:`render` turns it into ``book/audit.md`` (the appendix page), one
labelled paragraph per claim, so a chapter links to a row with ``{ref}`A6 <audit-a6>``` instead
of restating a verdict. Regenerate the page after editing a row::

    python book/_ext/audit.py        # writes book/audit.md

``tests/test_three_d_chapter.py`` checks that the committed page is what :func:`render` gives,
that every id appears once, and that every ``audit-…`` link in the book names an existing row.

Fields: ``id`` (article letter + number), ``claim`` (paraphrased, never quoted at length),
``verdict`` (one of :data:`VERDICTS`), ``evidence`` (what kind, then the argument: *measured* is a
run in this course, *derived* a formula of the cost model with its source, *cited* a published
paper, *arithmetic* a sum anyone can redo), ``section`` (the page that shows the evidence, a
``{doc}`` target, or "" when none does).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

VERDICTS = ("right", "imprecise", "wrong", "out of scope")

# One short title per article, used everywhere in the book.
ARTICLES = {
    "A": ("Communication Overhead", "Data vs. Tensor Parallelism: AI Communication Overhead"),
    "B": ("Comparative Analysis", "Data, Tensor, and Pipeline Parallelism: A Comparative Analysis"),
    "C": (
        "What Is Tensor Parallelism?",
        "What Is Tensor Parallelism? Multi-GPU Training Explained (Deploybase, 2025)",
    ),
}


class Claim(NamedTuple):
    id: str
    claim: str
    verdict: str
    evidence: str
    section: str


DP, TP, PP, TD, MT, CO = (
    "data_parallel",
    "tensor_parallel",
    "pipeline_parallel",
    "three_d",
    "memory_time",
    "collectives",
)
NB3 = "../notebooks/three_d"

CLAIMS: tuple[Claim, ...] = (
    # ---------------------------------------------------------------- A: Communication Overhead
    Claim(
        "A1",
        "DP keeps a full model copy per GPU and gives each a different slice of data",
        "right",
        "measured: DP equals one process on the whole batch",
        DP,
    ),
    Claim(
        "A2",
        "DP communicates only in backward, averaging gradients with all-reduce",
        "right",
        "measured, for plain DP (ZeRO-3/FSDP also all-gathers parameters in forward)",
        DP,
    ),
    Claim(
        "A3",
        "DP communicates once per iteration, at the end of backward",
        "imprecise",
        "measured: once per optimizer step logically, but as one all-reduce per bucket, "
        "launched *during* backward",
        DP,
    ),
    Claim(
        "A4",
        "DP's volume is proportional to the parameter count",
        "right",
        "measured: $2\\frac{d-1}{d}$ × the gradient bytes per rank per step, the same at "
        "batch 4 and 256",
        DP,
    ),
    Claim(
        "A5",
        "DP's gradient traffic for later layers overlaps the backward of earlier layers",
        "right",
        "measured: bucket timeline; DDP launches buckets in order {cite:p}`li2020ddp`",
        DP,
    ),
    Claim(
        "A6",
        "DP works efficiently over ordinary Ethernet or InfiniBand",
        "imprecise",
        "derived: a ring all-reduce sends $2\\frac{d-1}{d} \\cdot 2\\Psi \\approx 4\\Psi$ bytes "
        "per GPU per step for $2\\Psi$ bytes of bf16 gradients; for a 70B model that is "
        "280 GB, ≈ 22 s at 100 Gb/s (12.5 GB/s), longer than many steps",
        DP,
    ),
    Claim(
        "A7",
        "TP splits a layer's weight matrices across GPUs, used when a model does not fit",
        "right",
        "derived (TP is also used for speed)",
        TP,
    ),
    Claim(
        "A8",
        "TP ranks cannot start the next layer before combining partial results",
        "right",
        "derived: the $g$ all-reduce after a row-parallel layer {cite:p}`shoeybi2019`",
        TP,
    ),
    Claim(
        "A9",
        "TP communicates several times per layer, in forward and backward",
        "right",
        "measured: 2 all-reduces forward and 2 backward per layer, traced",
        TP,
    ),
    Claim(
        "A10",
        "TP's volume is proportional to activation size (batch, sequence, hidden)",
        "right",
        "measured: $4 \\cdot 2\\frac{t-1}{t}\\, bsh$ elements per layer per "
        "micro-batch, tracer equal to the cost model",
        TP,
    ),
    Claim(
        "A11",
        "TP's communication can almost never be overlapped with computation",
        "imprecise",
        "measured: the backward input-gradient all-reduce overlaps the "
        "weight-gradient GEMM (Megatron's async all-reduce); cited: decomposed collective "
        "matmuls overlap the forward ones too {cite:p}`wang2023overlap`",
        TP,
    ),
    Claim(
        "A12",
        "TP needs NVLink-class links and stays inside one server",
        "right",
        "derived: even with NCCL spreading the rings over all eight NICs of each node, the "
        "planner's TP share of MT-NLG's step grows from 6 % ($t = 8$) to 18 % ($t = 16$ "
        "across two nodes); per layer the bandwidth alone costs 1.6× (200 GB/s of NICs per "
        "node against NVLink's 300), 13× through one NIC",
        NB3,
    ),
    Claim(
        "A13",
        "with 80 layers TP makes hundreds of communication calls per step, DP one exchange",
        "imprecise",
        "derived: TP makes $4L$ = 320 all-reduces per micro-batch "
        "(right); DP makes one per bucket, not one",
        DP,
    ),
    Claim(
        "A14",
        "DP is bandwidth-bound and tolerates latency",
        "right",
        "derived: α is paid once per bucket, $2\\frac{d-1}{d}S\\beta$ dominates for "
        "megabyte buckets",
        CO,
    ),
    Claim(
        "A15",
        "TP is both latency- and bandwidth-bound, because every call blocks",
        "imprecise",
        "derived: every call is on the critical path (right), but training "
        "messages of tens of MB are bandwidth-bound: latency dominates only below "
        "$S \\approx n\\alpha/\\beta$, a few MB on NVLink (as B5 and B7)",
        TP,
    ),
    Claim(
        "A16",
        "DP scales to hundreds of nodes with little loss, the batch growing with GPUs",
        "imprecise",
        "derived: ring bytes per rank tend to $2S$, but latency grows as "
        "$2(n-1)\\alpha$; cited: the batch cannot grow without limit "
        "{cite:p}`goyal2017accurate`",
        DP,
    ),
    Claim(
        "A17",
        "TP scales poorly beyond the 8 GPUs of one server",
        "right",
        "derived: the planner; the limit is the NVLink domain's size, not the number 8",
        NB3,
    ),
    Claim(
        "A18",
        "3D: TP inside a server, DP across servers",
        "imprecise",
        "leaves out where PP goes (across nodes, outermost in Megatron's rank order)",
        TD,
    ),
    # ---------------------------------------------------------------- B: Comparative Analysis
    Claim(
        "B1",
        "DP all-reduces the whole gradient once per step, after backward and before the optimizer",
        "imprecise",
        "measured: bucketed, during backward; ZeRO uses reduce-scatter + all-gather instead",
        DP,
    ),
    Claim(
        "B2",
        "DP's volume is proportional to model size, so it is sensitive to network bandwidth",
        "right",
        "measured: $2\\frac{d-1}{d}\\cdot 2\\Psi$ bytes per rank",
        DP,
    ),
    Claim(
        "B3",
        "PP sends activations point-to-point to the next stage, forward and backward, "
        "per micro-batch",
        "right",
        "measured: the activation forward, its gradient of the same size backward, traced",
        PP,
    ),
    Claim(
        "B4",
        "PP moves far less data than DP and suits slower cross-node links",
        "right",
        "derived: $2bsh \\cdot 2/t$ bytes per micro-batch per boundary against a "
        "$\\Psi$-sized all-reduce",
        TD,
    ),
    Claim(
        "B5",
        "PP is sensitive to the latency of its point-to-point links",
        "imprecise",
        "derived: a $(1, 2048, 12288)$ bf16 activation is 50 MB, ≈ 1 ms at 50 GB/s against "
        "α ≈ 5 µs: bandwidth dominates; the bubble and dependency stalls cost more",
        PP,
    ),
    Claim(
        "B6",
        "TP uses all-reduce or all-gather depending on the sharding",
        "right",
        "measured: row-parallel partial sums need an all-reduce; a column-parallel output "
        "that must be whole needs an all-gather (and sequence parallelism uses both halves)",
        TP,
    ),
    Claim(
        "B7",
        "TP across InfiniBand adds prohibitive latency",
        "imprecise",
        "derived: the penalty is bandwidth (25–50 GB/s per GPU vs 300–450 GB/s on NVLink), "
        "more than latency",
        TP,
    ),
    Claim(
        "B8",
        "plain DP replicates weights, gradients and optimizer state on every GPU",
        "right",
        "derived: $16\\Psi$ bytes per GPU with mixed-precision Adam",
        MT,
    ),
    Claim(
        "B9",
        "PP over $P$ GPUs leaves each about $1/P$ of the parameters and optimizer state",
        "imprecise",
        "derived: only the middle stages; the first holds the embedding, the "
        "last the output layer (BLOOM: 250,880 × 14,336 ≈ 3.6B parameters on one stage, "
        "a quarter more than its share of layers)",
        PP,
    ),
    Claim(
        "B10",
        "TP over $T$ GPUs leaves each $1/T$ of a layer's parameters",
        "right",
        "derived (layer norms and the row-parallel biases are replicated: a few $h$ per layer)",
        TP,
    ),
    Claim(
        "B11",
        "PP stores activations of every in-flight micro-batch, so many micro-batches strain memory",
        "imprecise",
        "measured: true of GPipe ($m$ in flight); under 1F1B "
        "at most $p$ are in flight, whatever $m$ {cite:p}`narayanan2021`",
        PP,
    ),
    Claim("B12", "DP is the default when the model fits on one GPU", "right", "derived", DP),
    Claim(
        "B13",
        "PP's point-to-point traffic makes it the choice for crossing nodes",
        "right",
        "derived; Megatron puts PP outermost",
        TD,
    ),
    Claim(
        "B14",
        "TP belongs inside a node and has no bubble",
        "right",
        "derived: all TP ranks work on every layer at once (it has exposed communication instead)",
        TP,
    ),
    Claim(
        "B15",
        "3D: TP in a node, PP across nodes (a stage is a node), DP across pipeline replicas",
        "right",
        "measured: the rank grid's groups on 8 gloo ranks",
        TD,
    ),
    Claim(
        "B16",
        "the best configuration trades the bubble (small $P$) against communication "
        "($T$ in the fast domain)",
        "imprecise",
        "derived: also memory (what fits) and $d$, which sets $m = B/(db)$ and so the bubble",
        TD,
    ),
    Claim(
        "B17",
        "DP offers no memory savings",
        "imprecise",
        "derived: true for plain DP's model states (B8 says the same and is right); "
        "ZeRO/FSDP are data parallelism and shard them, ZeRO-3 to $16\\Psi/d$ "
        "{cite:p}`rajbhandari2020zero`; at a fixed global batch DP also divides each GPU's "
        "activations by $d$",
        DP,
    ),
    Claim(
        "B18",
        "DP and TP use bandwidth-heavy collectives; PP uses light point-to-point",
        "right",
        "derived",
        TD,
    ),
    Claim(
        "B19",
        "PP brings a bubble; TP needs expensive interconnects",
        "right",
        "derived: bubble $(p-1)/m$ of ideal time",
        PP,
    ),
    Claim(
        "B20",
        "PP is essential when the model is too large for one GPU",
        "imprecise",
        "derived: one way, not the only one: TP and ZeRO-3/FSDP also split the model, with "
        "collectives instead of a bubble",
        PP,
    ),
    Claim(
        "B21",
        "DP's replication of all states is the reason model parallelism is needed for large models",
        "imprecise",
        "derived: ZeRO-3 removes the replication within "
        "DP; model parallelism is still needed when one layer's activations or a stage's "
        "share do not fit, or to keep the batch per GPU small",
        DP,
    ),
    Claim(
        "B22",
        "TP is particularly effective for models with very large layers",
        "right",
        "derived: TP's communication-to-compute ratio falls as $1/h$",
        TP,
    ),
    Claim(
        "B23",
        "TP communicates partial activations or intermediate results within a layer",
        "right",
        "measured: the partial sums of row-parallel layers (all-reduce), activation "
        "slices under sequence parallelism (all-gather)",
        TP,
    ),
    # ---------------------------------------------------------------- C: What Is TP?
    Claim(
        "C1", "TP divides model matrices across GPUs, so larger models fit", "right", "derived", TP
    ),
    Claim(
        "C2",
        "spreading a model over GPUs removes memory limits on model size",
        "imprecise",
        "derived: $t$ is bounded by the heads and the node; 10 of the 34 activation bytes per "
        "$sbh$ stay replicated without sequence parallelism; the micro-batch and the first "
        "stage's activations must still fit",
        MT,
    ),
    Claim("C3", "a 14400×1000 matrix on 2 GPUs is 7200×1000 per GPU", "right", "arithmetic", ""),
    Claim(
        "C4",
        'row splitting needs "column combining", column splitting "row combining"',
        "wrong",
        "derived: garbled: a row split gives partial sums that must be added "
        "(all-reduce); a column split gives disjoint slices that need nothing if a "
        "row-parallel layer follows, else an all-gather",
        TP,
    ),
    Claim(
        "C5",
        "in TP's backward, gradients are synchronised by all-reduce",
        "imprecise",
        "measured: TP's backward does all-reduce, but the *input-activation* gradients (the "
        "backward of $f$); weight gradients stay on their shard. The error is the "
        "data-parallel framing around it",
        TP,
    ),
    Claim(
        "C6",
        "TP ranks update their shards independently; asynchronous updates risk divergence",
        "imprecise",
        "the first half is right; TP is synchronous, and "
        "asynchrony is a DP topic {cite:p}`dean2012large`",
        DP,
    ),
    Claim(
        "C7",
        "H100 SXM NVLink: 900 GB/s bidirectional",
        "right",
        "cited: datasheet; a ring step uses one direction, 450 GB/s",
        CO,
    ),
    Claim(
        "C8",
        "PCIe: about 64 GB/s bidirectional",
        "wrong",
        "derived: PCIe 5.0 ×16 is ≈ 63 GB/s *per direction*, ≈ 126 GB/s bidirectional",
        CO,
    ),
    Claim(
        "C9",
        "NVLink's higher hourly price pays off where GPU-to-GPU traffic dominates",
        "imprecise",
        "derived: at the article's prices the NVLink server buys the cheaper token "
        "(0.586 against 0.645 dollars per million tokens, 10 % apart) with NCCL's "
        "hierarchical ZeRO-3 across nodes; at DeepSpeed's 2021 one-NIC rate its best layout "
        "changes and its token costs 0.635; with the same chip and price the PCIe link alone "
        "makes a token 14 % dearer, less than the 35 % price gap, and the PCIe part (114 SMs, "
        "2.0 TB/s HBM2e) still beats that SXM-behind-PCIe row; chip, link, price and the "
        "software's achieved bandwidth decide together (the 3D notebook's cost-per-token cell "
        "asserts these)",
        NB3,
    ),
    Claim(
        "C10",
        "communication grows with model size",
        "imprecise",
        "derived: TP's grows with $bsh$ per layer, DP's with Ψ",
        TD,
    ),
    Claim(
        "C11",
        "scaling efficiency is 80–90 % at 8 GPUs and 50–70 % at 64",
        "imprecise",
        "cited: no source given; Megatron-LM's 8-way TP weak scaling kept about 77 % of "
        "linear, and 74–76 % at 512 GPUs with DP {cite:p}`shoeybi2019`; Megatron kept 43–52 % of "
        "peak from 32 to 3072 GPUs {cite:p}`narayanan2021`",
        TP,
    ),
    Claim(
        "C12",
        "larger batches amortise communication",
        "imprecise",
        "derived: true for DP (bytes fixed per step) and PP (bubble $(p-1)/m$); TP's "
        "traffic grows with the batch",
        TP,
    ),
    Claim(
        "C13",
        "DP is simpler and scales better for most workloads",
        "right",
        "derived, when the model fits",
        DP,
    ),
    Claim("C14", "PP's bubble reduces throughput", "right", "derived: $(p-1)/m$ of ideal time", PP),
    Claim(
        "C15",
        "training a 70B model needs several GPUs",
        "right",
        "derived: $16\\Psi$ ≈ 1.1 TB of model states",
        MT,
    ),
    Claim(
        "C16",
        "a parameter server bottlenecks; ring all-reduce avoids it; hierarchical "
        "reduction follows the topology",
        "right",
        "measured: traced bytes, server $3S$ vs "
        "ring $1.5S$ on 4 ranks; derived: the ring's $2(n-1)\\alpha$ loses to trees for "
        "small messages",
        CO,
    ),
    Claim(
        "C17",
        "8 GPUs cut per-GPU memory 8×",
        "imprecise",
        "derived: only what is sharded; activations partly replicated without sequence "
        "parallelism, the embedding on one stage",
        MT,
    ),
    Claim(
        "C18",
        "activation memory still needs full storage",
        "wrong",
        "measured: TP divides 24 of the 34 bytes per $sbh$ (and the attention scores) by "
        "$t$, sequence parallelism the rest {cite:p}`korthikanti2022`; C39 in the same "
        "article says the opposite",
        MT,
    ),
    Claim(
        "C19",
        "Adam needs 2× the model's memory",
        "imprecise",
        "measured: 8 B per parameter against 4-byte weights; 12 B (with fp32 master "
        "weights) against 2-byte weights",
        MT,
    ),
    Claim(
        "C20",
        "distributed optimizers split optimizer state across devices",
        "right",
        "measured: ZeRO-1 state bytes",
        DP,
    ),
    Claim(
        "C21",
        "batch size trades per-request latency against throughput",
        "out of scope",
        "inference serving",
        "",
    ),
    Claim(
        "C22",
        "a barrier makes every GPU wait for the slowest",
        "right",
        "measured: a straggler delays every rank's step",
        DP,
    ),
    Claim(
        "C23",
        "asynchronous updates cut waiting but staleness hurts convergence",
        "right",
        "cited {cite:p}`recht2011hogwild,dean2012large`; a DP topic",
        DP,
    ),
    Claim(
        "C24",
        "gradient accumulation is periodic synchronisation with some staleness",
        "wrong",
        "measured: accumulation equals one process on the whole batch, no "
        "staleness (local SGD is the periodic one)",
        DP,
    ),
    Claim(
        "C25",
        "training Llama 70B uses 64–256 GPUs",
        "wrong",
        "derived: 1.72 M A100-hours {cite:p}`touvron2023llama2` would take about 280 days "
        "on 256 GPUs",
        NB3,
    ),
    Claim("C26", "64 H100 at \\$2.69 cost \\$172 per hour", "right", "arithmetic", ""),
    Claim(
        "C27",
        "fine-tuning needs only 8–16 GPUs",
        "imprecise",
        "derived: full fine-tuning of a 70B model does not fit on 8 A100-80GB (the 3D "
        "notebook finds the smallest cluster); adapter methods, out of scope, need fewer",
        NB3,
    ),
    Claim("C28", "inference deployment sizing", "out of scope", "inference", ""),
    Claim(
        "C29",
        "overlap hides communication: forward passes compute while gradients move",
        "imprecise",
        "measured: DDP's gradients overlap *backward*; ZeRO-1/2's parameter "
        "all-gather and FSDP's prefetch overlap forward",
        DP,
    ),
    Claim(
        "C30",
        "gradient compression and quantisation reduce traffic",
        "right",
        "measured: fp16 hooks halve the bytes; cited: PowerSGD {cite:p}`vogels2019powersgd`; "
        "time falls only where traffic is exposed",
        DP,
    ),
    Claim(
        "C31",
        "shorter cables reduce latency",
        "imprecise",
        "derived: light in fibre takes ≈ 5 ns per metre, 0.5 µs over a 100 m cluster cable, "
        "against an α of microseconds in software; topology acts through bandwidth and "
        "hops",
        CO,
    ),
    Claim(
        "C32",
        "one 80 GB A100 holds a single copy of a 70B-class model",
        "imprecise",
        "ambiguous as written; if it means the model fits on one GPU, it does not: 70 B "
        "bf16 weights alone are 140 GB",
        MT,
    ),
    Claim(
        "C33",
        "TP pays off above ~100 B parameters; smaller models rarely justify it",
        "imprecise",
        "cited: Megatron uses $t = 2$–8 from 3.6 B up {cite:p}`narayanan2021`; "
        "it is a question of what fits and of $h$, not of a parameter count",
        TP,
    ),
    Claim(
        "C34",
        "latency-sensitive inference benefits from several GPUs",
        "out of scope",
        "inference",
        "",
    ),
    Claim(
        "C35",
        "quantisation and distillation are alternatives to parallelism",
        "out of scope",
        "not training parallelism",
        "",
    ),
    Claim(
        "C36",
        "mixture-of-experts scales without proportional communication",
        "imprecise",
        "derived: expert parallelism adds two all-to-alls per MoE layer per pass, crossing "
        "nodes once experts outnumber the GPUs of a node",
        "expert_parallel",
    ),
    Claim(
        "C37",
        "TP's communication overhead is 10–40 %",
        "imprecise",
        "derived: it depends on $t$, the link, $h$ and overlap, so no one range holds. "
        "GPT-3's layer on H100s in bf16 at $t = 8$, nothing overlapped: "
        "{glue:text}`../notebooks/tensor_parallel.ipynb::tp_share_nvlink_8:.0f` % of its "
        "time over NVLink, "
        "{glue:text}`../notebooks/tensor_parallel.ipynb::tp_share_ib_8:.0f` % across "
        "InfiniBand. The 3D planner's whole MT-NLG 530B step on A100s ($h = 20480$, a peak "
        "FLOP/s to NVLink bandwidth ratio half the H100's, sequence parallelism): "
        "{glue:text}`../notebooks/three_d.ipynb::tp8_share:.1f` % at $t = 8$ in a node, "
        "{glue:text}`../notebooks/three_d.ipynb::tp16_share:.0f` % at $t = 16$ across two",
        TP,
    ),
    Claim(
        "C38",
        "TP and DP can be combined",
        "right",
        "measured: the 3D run on 8 gloo ranks equals one process",
        TD,
    ),
    Claim(
        "C39",
        "activation tensors are distributed too: layer outputs split across devices",
        "right",
        "measured: a column-parallel layer's output is split by $t$, and sequence "
        "parallelism splits the rest (contradicts C18)",
        TP,
    ),
    Claim(
        "C40",
        "unbalanced splits degrade performance",
        "right",
        "measured: the slowest shard or stage sets the pace; the first and last pipeline "
        "stages carry the embedding and the head",
        PP,
    ),
    Claim(
        "C41",
        "GPUs in remote data centres pay latency penalties",
        "right",
        "derived: light in fibre takes ≈ 5 µs per km, milliseconds between sites against "
        "microseconds in a cluster; the lower bandwidth between sites costs DP's "
        "Ψ-sized all-reduce more",
        CO,
    ),
    Claim(
        "C42",
        "FP16 vs FP32 changes memory use",
        "right",
        "measured: 16-bit halves the activations and the forward weights; mixed-precision "
        "Adam still keeps $16\\Psi$ of model states",
        MT,
    ),
)


def label(claim_id: str) -> str:
    """The MyST label of a row: ``audit-a6``."""
    return f"audit-{claim_id.lower()}"


def _section(target: str) -> str:
    return f"{{doc}}`{target}`" if target else "—"


def counts() -> dict:
    out = {v: 0 for v in VERDICTS}
    for c in CLAIMS:
        out[c.verdict] += 1
    return out


def render() -> str:
    """The appendix page, as MyST Markdown."""
    n = counts()
    lines = [
        "<!-- Generated by `python book/_ext/audit.py` from book/_ext/audit.py: edit the data "
        "there, not this page. -->",
        "",
        "(audit)=",
        "# Appendix: the source articles, claim by claim",
        "",
        "The course was commissioned from three articles. Each is named here, and everywhere "
        "in the book, by one short title:",
        "",
    ]
    for letter, (short, full) in ARTICLES.items():
        lines.append(f'* **{letter}**, *{short}*: "{full}".')
    lines += [
        "",
        "Every substantive claim they make is paraphrased below with a verdict and its "
        "evidence. *Measured* means a run in this course, *derived* a formula of the cost "
        "model (with its source), *cited* a published paper, *arithmetic* a sum anyone can "
        "redo. The chapters link to these rows instead of restating a verdict, so a verdict "
        "is given once. Claims about inference, quantisation or distillation are out of scope.",
        "",
        f"Counts: {len(CLAIMS)} claims, {n['right']} right, {n['imprecise']} imprecise, "
        f"{n['wrong']} wrong, {n['out of scope']} out of scope.",
        "",
        "*What Is Tensor Parallelism?* has one problem beyond single claims. Under the "
        'headings "Data Flow in Tensor Parallel Systems", "Communication Overhead Impact", '
        '"Gradient Synchronization", "Synchronization Requirements" and "Communication '
        'Bottleneck Mitigation" it describes **data parallelism**: all-reducing gradients '
        "across GPUs, asynchronous updates and staleness, gradient compression, and a "
        "communication volume that grows with the model. Tensor parallelism all-reduces "
        "*activations* and their gradients; its weight gradients are never all-reduced over "
        "the TP group, because each rank owns a different shard. The course reads those "
        "claims as data-parallel ones (C6, C11, C22–C24, C29, C30) and checks them in "
        "{doc}`data_parallel` and {doc}`tensor_parallel`.",
    ]
    for letter, (short, _) in ARTICLES.items():
        lines += ["", f"## {letter}: *{short}*"]
        for c in CLAIMS:
            if c.id[0] != letter:
                continue
            lines += [
                "",
                f"({label(c.id)})=",
                f"**{c.id}** · **{c.verdict}**. {c.claim[0].upper()}{c.claim[1:]}. "
                f"*Evidence:* {c.evidence}. *Shown in:* {_section(c.section)}.",
            ]
    return "\n".join(lines) + "\n"


PAGE = Path(__file__).resolve().parents[1] / "audit.md"


def main() -> None:
    PAGE.write_text(render())
    print(f"wrote {PAGE} ({len(CLAIMS)} claims)")


if __name__ == "__main__":
    main()
