"""The context-parallel explorer's JavaScript equals its Python twins (minipar.cost is the source
of truth), including the error messages of impossible inputs; the default view draws and an
impossible setting gives the Python error message."""

import functools
import re

import pytest
from explorer_parity_support import assert_parity, js_call, node_available

pytestmark = pytest.mark.skipif(not node_available(), reason="needs Node.js")

CPS = (1, 2, 3, 4, 16, 0)
LAYOUTS = ("contiguous", "zigzag", "striped", "diagonal")
SHAPE = ("b", "s", "h", "cp", "layout", "causal", "diagonal", "bytes_per_elem", "h_kv", "a_kv")


def shaped(case: dict) -> dict:
    """A flat case as the forward-time models take it: the AttentionShape's fields as one
    ``shape``, then the other arguments in order (the JavaScript twin's positional order)."""
    rest = {k: v for k, v in case.items() if k not in SHAPE}
    return {"shape": {k: case[k] for k in SHAPE if k in case}, **rest}


def on_shape(fn):
    """``fn`` called as its JavaScript twin is: with the shape's fields, built (and checked) here
    into an AttentionShape, so a refused shape is the same error in both languages."""
    from minipar.cost.chapters.context_parallel import AttentionShape

    @functools.wraps(fn)
    def call(shape, *args, **kw):
        return fn(AttentionShape(**shape), *args, **kw)

    return call


@pytest.mark.slow
def test_cost_twins():
    from minipar.cost.chapters import context_parallel as C

    shapes = [
        dict(s=s, cp=cp, layout=lay) for s in (8, 24, 131072, 10) for cp in CPS for lay in LAYOUTS
    ]
    counts = assert_parity(
        "context_parallel", "checkShape", lambda **kw: C.check_shape(**kw) or None, shapes
    )
    assert 0 < counts["errors"] < counts["cases"]
    grid = [
        dict(b=b, s=s, h_kv=h, cp=cp, bytes_per_elem=2)
        for b in (1, 3)
        for s in (24, 131072)
        for h in (48, 1024)
        for cp in CPS
    ]
    assert_parity("context_parallel", "kvBlockBytes", C.kv_block_bytes, grid)
    acc = [dict(g, accum_bytes_per_elem=e) for g in grid for e in (None, 2, 4, 0)]
    for name, fn in (
        ("ringSentBytesPerLayer", C.ring_sent_bytes_per_layer),
        ("allgatherCollectivesPerLayer", C.allgather_collectives_per_layer),
        ("allgatherSentBytesPerLayer", C.allgather_sent_bytes_per_layer),
    ):
        counts = assert_parity("context_parallel", name, fn, acc)
        assert 0 < counts["errors"] < counts["cases"]
    assert_parity(
        "context_parallel",
        "accumBytes",
        C.accum_bytes,
        [
            dict(bytes_per_elem=e, accum_bytes_per_elem=a)
            for e in (2, 4, 8)
            for a in (None, 2, 4, -1)
        ],
    )
    assert_parity(
        "context_parallel", "ringSendsPerLayer", C.ring_sends_per_layer, [dict(cp=cp) for cp in CPS]
    )
    uly = [
        dict(b=b, s=s, h=h, cp=cp, bytes_per_elem=2, h_kv=kv, a_kv=akv)
        for b in (1, 2)
        for s in (24, 4096)
        for h in (48, 16384)
        for cp in CPS
        for kv in (None, 16, 0)
        for akv in (None, 1, 2, 8, 3)
    ]
    for name, fn in (
        ("ulyssesAllToAllsPerLayer", C.ulysses_all_to_alls_per_layer),
        ("ulyssesSentBytesPerLayer", C.ulysses_sent_bytes_per_layer),
    ):
        counts = assert_parity("context_parallel", name, fn, uly)
        assert 0 < counts["errors"] < counts["cases"]
    pairs = [
        dict(cp=cp, layout=lay, causal=c, diagonal=dg)
        for cp in CPS
        for lay in LAYOUTS
        for c in (True, False)
        for dg in ("half", "whole", "skip")
    ]
    for name, fn in (("pairsPerRank", C.pairs_per_rank), ("imbalance", C.imbalance)):
        counts = assert_parity("context_parallel", name, fn, pairs)
        assert 0 < counts["errors"] < counts["cases"]
    steps = [
        dict(rank=r, cp=cp, layout=lay, causal=c, diagonal=dg)
        for cp in (1, 2, 3, 5)
        for r in range(cp)
        for lay in LAYOUTS
        for c in (True, False)
        for dg in ("half", "whole")
    ]
    assert_parity("context_parallel", "stepPairs", C.step_pairs, steps)
    flops = [
        dict(b=b, s=s, h=h, cp=cp, layout=lay, causal=c, diagonal=dg)
        for b in (1, 0)
        for s in (48, 1152)
        for h in (16, 128)
        for cp in CPS
        for lay in LAYOUTS
        for c in (True, False)
        for dg in ("half", "whole")
    ]
    assert_parity("context_parallel", "attentionFlopsPerRank", C.attention_flops_per_rank, flops)
    assert_parity(
        "context_parallel",
        "minTokensPerRankForOverlap",
        C.min_tokens_per_rank_for_overlap,
        [
            dict(flops=f, bandwidth=w, bytes_per_elem=2, kv_fraction=k, causal=c, layout=lay)
            for f in (989.4e12, 0)
            for w in (50e9, 450e9, -1)
            for k in (1.0, 0.0625)
            for c in (True, False)
            for lay in LAYOUTS
        ],
    )
    assert_parity(
        "context_parallel",
        "ringTimeFromSteps",
        C.ring_time_from_steps,
        [
            dict(step_compute=sc, step_comm=m)
            for sc in ([1.0], [1.0, 0.5, 0.5], [0.1, 2.0])
            for m in (0.0, 0.7)
        ],
    )
    assert_parity(
        "context_parallel",
        "activationBytesPerRank",
        C.activation_bytes_per_rank,
        [
            dict(s=s, b=1, h=h, a=a, cp=cp, blockwise=bw)
            for s in (4096, 131072)
            for h, a in ((4096, 32), (16384, 0))
            for cp in CPS
            for bw in (True, False)
        ],
    )


def test_attention_shape_twin():
    """AttentionShape checks the shape once, in the same words in both languages, and fills
    h_kv; a checked shape checked again comes back the same."""
    from minipar.cost.chapters import context_parallel as C

    cases = [
        dict(b=b, s=s, h=h, cp=cp, layout=lay, causal=c, diagonal=dg, h_kv=kv, a_kv=akv)
        for b in (1, 0)
        for s in (24, 131072)
        for h, kv in ((48, None), (16384, 1024), (48, 0))
        for cp in (1, 3, 16, 0)
        for lay in ("zigzag", "striped", "diagonal")
        for c in (True, False)
        for dg in ("half", "whole", "none")
        for akv in (None, 8, 0)
    ]
    counts = assert_parity(
        "context_parallel",
        "attentionShape",
        lambda **kw: C.AttentionShape(**kw),
        cases,
        js_args=lambda case: [case],
    )
    assert 0 < counts["errors"] < counts["cases"]
    shape = C.AttentionShape(1, 48, 48, 3)
    assert (shape.h_kv, shape.layout, shape.chunk, shape.kv_block) == (48, "zigzag", 8.0, 3072.0)
    ((_, again),) = js_call("context_parallel", [("attentionShape", [dict(b=1, s=48, h=48, cp=3)])])
    ((_, twice),) = js_call("context_parallel", [("attentionShape", [again])])
    assert again == twice and (again["chunk"], again["kv_block"]) == (8, 3072)
    with pytest.raises(ValueError, match=r"sequence length s \(48\) must be divisible by 2·cp"):
        C.AttentionShape(1, 48, 48, 5)
    with pytest.raises(AttributeError):
        shape.cp = 2  # frozen: checked once, never changed after


def test_time_twins():
    from minipar.cost.chapters import context_parallel as C

    cases = [
        dict(
            b=1,
            s=s,
            h=h,
            cp=cp,
            flops=f,
            bandwidth=w,
            alpha=al,
            layout=lay,
            causal=c,
            bytes_per_elem=2,
            h_kv=kv,
            diagonal=dg,
        )
        for s in (4096, 131072)
        for h, kv in ((16384, 1024), (4096, None))
        for cp in (1, 2, 3, 16)
        for f, w, al in ((989.4e12, 50e9, 5e-6), (312e12, 450e9, 2e-6), (1e12, 0, 0), (0, 1e9, 0))
        for lay in ("contiguous", "zigzag", "striped")
        for c in (True, False)
        for dg in ("half", "whole")
    ]
    ring = on_shape(C.ring_attention_time)
    counts = assert_parity("context_parallel", "ringAttentionTime", ring, list(map(shaped, cases)))
    assert 0 < counts["errors"] < counts["cases"]
    ag = [
        shaped(dict(c, algorithm=alg))
        for c in cases[::3]
        for alg in ("ring", "recursive-doubling", "tree")
    ]
    counts = assert_parity(
        "context_parallel", "allgatherAttentionTime", on_shape(C.allgather_attention_time), ag
    )
    assert 0 < counts["errors"] < counts["cases"]
    uly = [
        shaped(
            dict(b=1, s=s, h=h, cp=cp, alpha=al, bandwidth=w, bytes_per_elem=2, h_kv=kv, a_kv=akv)
        )
        for s in (4096, 131072)
        for h, kv in ((16384, 1024), (4096, None))
        for cp in (1, 2, 8, 0)
        for al, w in ((5e-6, 50e9), (0, 0), (-1, 1e9))
        for akv in (None, 4, 8, 3, 0)
    ]
    counts = assert_parity("context_parallel", "ulyssesTime", on_shape(C.ulysses_time), uly)
    assert 0 < counts["errors"] < counts["cases"]


def test_layer_model_twin():
    from minipar.widgets.context_parallel import cp_layer_model

    cases = [
        dict(
            s=s, cp=cp, layout=lay, h=h, a=a, a_kv=kv, b=b, flops=989.4e12, bandwidth=w, alpha=5e-6
        )
        for s in (131072, 24, 1000)
        for cp in (1, 2, 3, 8, 16)
        for lay in ("zigzag", "contiguous")
        for h, a, kv in ((16384, 128, 8), (48, 12, 12), (4096, 32, 5))
        for b in (1, 2)
        for w in (50e9, 450e9)
    ]
    counts = assert_parity("context_parallel", "cpLayerModel", cp_layer_model, cases)
    assert 0 < counts["errors"] < counts["cases"]


DOC_LISTS = (
    [24],
    [5, 19],
    [10, 10, 4],
    [1] * 24,
    [3, 1, 7, 2, 11],
    [8] * 3,
    [0, 24],
    [12, 11],
    [2.5, 21.5],
    [],
)


@pytest.mark.slow
def test_document_twins():
    """The causal document mask's work and times (document_step_work, document_attention_times)
    and the explorer's equal packing: JavaScript equals Python, refusals in the same words."""
    from minipar.cost.chapters import context_parallel as C
    from minipar.widgets import context_parallel as W

    assert_parity(
        "context_parallel",
        "pairsBelow",
        C._pairs_below,
        [
            dict(a=a, b=b, c=c, e=e)
            for a in (0, 3, 7)
            for b in (0, 5, 9, 16)
            for c in (0, 2, 6)
            for e in (1, 6, 12, 20)
        ],
    )
    work = [
        dict(s=24, cp=cp, layout=lay, documents=docs)
        for cp in (1, 2, 3, 4, 0)
        for lay in LAYOUTS
        for docs in DOC_LISTS
    ]
    counts = assert_parity("context_parallel", "documentStepWork", C.document_step_work, work)
    assert 0 < counts["errors"] < counts["cases"]
    times = [
        dict(
            b=b,
            s=s,
            h=16384,
            cp=cp,
            documents=[s // n] * n,
            flops=f,
            bandwidth=w,
            alpha=al,
            layout=lay,
            bytes_per_elem=2,
            h_kv=kv,
            algorithm=alg,
        )
        for b in (1, 2)
        for s in (1920, 131072)
        for cp in (1, 3, 8, 16)
        for n in (1, 3, 5, 8, 12)
        if s % n == 0
        for f, w, al in ((989.4e12, 50e9, 5e-6), (989.4e12, 450e9, 2e-6), (0, 1e9, 0))
        for lay in ("zigzag", "contiguous", "striped")
        for kv in (1024, None)
        for alg in ("ring", "recursive-doubling")
    ]
    counts = assert_parity(
        "context_parallel",
        "documentAttentionTimes",
        on_shape(C.document_attention_times),
        list(map(shaped, times)),
    )
    assert 0 < counts["errors"] < counts["cases"]
    counts = assert_parity(
        "context_parallel",
        "equalDocuments",
        W.equal_documents,
        [
            dict(s=s, documents=n)
            for s in (1920, 131072)
            for n in (1, 2, 3, 5, 8, 12, 1024, 0, -1, 2.5, 2000, "")
        ],
    )
    assert 0 < counts["errors"] < counts["cases"]


def test_layer_model_twin_with_documents():
    """The explorer's model with packed documents, at counts that are not powers of two and
    counts it refuses (not dividing s, 0, over the box's max)."""
    from minipar.widgets.context_parallel import cp_layer_model

    cases = [
        dict(
            s=s,
            cp=cp,
            layout=lay,
            h=16384,
            a=128,
            a_kv=8,
            b=1,
            flops=989.4e12,
            bandwidth=w,
            alpha=5e-6,
            documents=n,
        )
        for s in (131072, 1920)
        for cp in (1, 3, 8, 16)
        for lay in ("zigzag", "contiguous", "striped")
        for w in (50e9, 450e9)
        for n in (1, 3, 5, 8, 12, 0, 2048)
    ]
    counts = assert_parity("context_parallel", "cpLayerModel", cp_layer_model, cases)
    assert 0 < counts["errors"] < counts["cases"]
    ok = cp_layer_model(s=1920, cp=8, layout="zigzag", documents=5, flops=989.4e12, bandwidth=450e9)
    assert ok["document_length"] == 384 and ok["document_times"]["ring"] > 0
    assert cp_layer_model(layout="striped", documents=8)["document_times"] is None


def test_documents_are_refused_in_the_same_words_in_javascript_and_python():
    from minipar.widgets import inputs
    from minipar.widgets.context_parallel import cp_config, cp_explorer, cp_layer_model

    cfg = cp_config()
    bad = {
        3: "s (131072) must be divisible by documents (3)",
        0: "documents (0) must be at least 1",
        -2: "documents (-2) must be at least 1",
        2.5: "documents (2.5) must be a whole number",
        2048: "documents (2048) must be at most 1024",
        "": "documents is empty",
    }
    got = js_call(
        "context_parallel",
        [("drawExplorer", ["cp-layer", {"documents": n}, cfg, "documents"]) for n in bad],
    )
    for (n, msg), (_, out) in zip(bad.items(), got):
        assert out["error"] == msg, (n, out["error"])
        assert "<svg" not in out["html"] and "minipar-explorer-message" in out["html"]
        with pytest.raises(ValueError) as e:
            cp_explorer(documents=n)
        assert str(e.value) == msg
        if n != "":
            with pytest.raises(ValueError) as e:
                cp_layer_model(documents=n)
            assert str(e.value) == msg
    # the box is one of the page's number boxes, read by the Python contract too
    controls, divisible = inputs.js_controls("context_parallel", "cp-layer")
    box = next(c for c in controls if c["name"] == "documents")
    assert (box["label"], box["min"], box["max"], box["step"]) == ("documents", 1, 1024, 1)
    assert ["s", "documents"] in [list(p) for p in divisible]
    assert cp_explorer(documents=8).values == {"documents": 8}


def test_the_explorer_names_the_faster_scheme_under_a_document_mask():
    """The sentence under the chart gives the model's two times and the winner: at the
    defaults (IB, cp = 16) the ring's transfers bound it and it still wins with 8 documents;
    over NVLink at cp = 8 (the chapter's example) all-gather CP wins."""
    from minipar.cost.chapters import context_parallel as C
    from minipar.cost.kernels.hardware import GPUS, LINKS
    from minipar.widgets.context_parallel import cp_config

    cfg = cp_config()
    settings = [
        {},
        {"documents": 8},
        {"documents": 8, "cp": 8, "link": "nvlink4-h100"},
        {"documents": 64, "cp": 4, "layout": "contiguous"},
    ]
    unit = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
    got = js_call("context_parallel", [("drawExplorer", ["cp-layer", v, cfg]) for v in settings])
    texts = []
    for v, (_, out) in zip(settings, got):
        assert out["error"] is None, out["error"]
        s, cp, n = 131072, v.get("cp", 16), v.get("documents", 1)
        L = LINKS[v.get("link", "ib-ndr400")]
        d = C.document_attention_times(
            C.AttentionShape(1, s, 16384, cp, v.get("layout", "zigzag"), h_kv=1024),
            [s // n] * n,
            flops=GPUS["H100-SXM"].peak_flops["bf16"],
            bandwidth=L.bandwidth,
            alpha=L.alpha,
        )
        text = re.sub(r"<[^>]+>", "", out["html"])
        texts.append(text)
        m = re.search(
            r"the ring takes ([\d.]+) (s|ms|µs|ns) .*?all-gather CP ([\d.]+) (s|ms|µs|ns) ", text
        )
        assert m, text
        ring, ag = float(m[1]) * unit[m[2]], float(m[3]) * unit[m[4]]
        assert ring == pytest.approx(d["ring"], rel=1e-3)
        assert ag == pytest.approx(d["allgather"], rel=1e-3)
        ratio = max(d["ring"], d["allgather"]) / min(d["ring"], d["allgather"])
        winner = "the ring wins" if d["ring"] <= d["allgather"] else "all-gather CP wins"
        if ratio >= 1.005:
            assert f"{winner}, {ratio:.2f}× faster" in text
        else:
            assert "the same time to within 0.5%" in text
        assert (f"ring, {n} documents" in out["html"]) == (n > 1)  # the dashed curves
    assert (
        "One document of 131,072 tokens" in texts[0] and "the ring wins, 1.29× faster" in texts[0]
    )
    assert "Packed as 8 documents of 16,384 tokens" in texts[1]
    assert "all-gather CP wins" in texts[2]


def test_parity_check_catches_an_allgather_that_waits_like_the_ring():
    """Negative control: a twin in which all-gather CP pays the ring's per-step maxima
    (Σ_steps max_ranks, not max_ranks Σ_steps: the document mask's whole point) is reported."""
    from minipar.cost.chapters import context_parallel as C

    right = on_shape(C.document_attention_times)

    def wrong(**kw):
        d = right(**kw)
        return {**d, "allgather": d["gather"] + d["ring_compute"]}

    case = shaped(
        dict(
            b=1,
            s=131072,
            h=16384,
            cp=8,
            documents=[16384] * 8,
            flops=989.4e12,
            bandwidth=450e9,
            alpha=2e-6,
            layout="zigzag",
            bytes_per_elem=2,
            h_kv=1024,
            algorithm="ring",
        )
    )
    assert_parity("context_parallel", "documentAttentionTimes", right, [case])
    with pytest.raises(AssertionError, match="differs"):
        assert_parity("context_parallel", "documentAttentionTimes", wrong, [case])


def test_parity_check_catches_the_wrong_imbalance():
    """Negative control: a twin that uses cp/(cp+1) (forgetting that the mean is (cp+1)/2 pairs,
    not cp+1) is reported."""
    from minipar.cost.chapters import context_parallel as C

    wrong = lambda cp, layout, causal, diagonal: (
        C.imbalance(cp, layout, causal, diagonal)
        / (2 if layout == "contiguous" and causal and cp > 1 else 1)
    )
    with pytest.raises(AssertionError, match="differs"):
        assert_parity(
            "context_parallel",
            "imbalance",
            wrong,
            [dict(cp=cp, layout="contiguous", causal=True, diagonal="half") for cp in (1, 2, 3)],
        )


def test_parity_check_catches_bf16_accumulators():
    """Negative control: a twin that sends the dK/dV accumulators at the activations' 2 bytes
    (the under-count real float32 accumulators correct) is reported."""
    from minipar.cost.chapters import context_parallel as C

    wrong = lambda b, s, h_kv, cp, bytes_per_elem, accum_bytes_per_elem: (
        C.ring_sent_bytes_per_layer(b, s, h_kv, cp, bytes_per_elem, bytes_per_elem)
    )
    with pytest.raises(AssertionError, match="differs"):
        assert_parity(
            "context_parallel",
            "ringSentBytesPerLayer",
            wrong,
            [dict(b=1, s=131072, h_kv=1024, cp=16, bytes_per_elem=2, accum_bytes_per_elem=None)],
        )


def test_default_view_and_messages():
    from minipar.widgets.context_parallel import cp_config

    cfg = cp_config()
    calls = [
        ("drawExplorer", ["cp-layer", {}, cfg]),
        ("drawExplorer", ["cp-layer", {"cp": 5, "s": 131072, "layout": "zigzag"}, cfg]),
        ("drawExplorer", ["cp-layer", {"a_kv": 5}, cfg]),
        ("drawExplorer", ["cp-layer", {"cp": 0}, cfg]),
    ]
    (_, default), (_, bad_s), (_, bad_kv), (_, bad_cp) = js_call("context_parallel", calls)
    assert default["error"] is None and "<svg" in default["html"] and "</svg>" in default["html"]
    assert "Ulysses sends" in default["html"]  # 8 K/V heads, cp = 16: replicated
    assert "All-gather CP" in default["html"] and "float32" in default["html"]
    assert bad_s["error"] == "sequence length s (131072) must be divisible by 2·cp (10)"
    assert bad_kv["error"] == "a (128) must be divisible by K/V heads (5)"  # the input contract
    assert bad_cp["error"] in ("cp (0) must be an integer >= 1", "cp (0) must be at least 1")
    assert "minipar-explorer-message" in bad_s["html"]


def test_widget_has_a_self_contained_static_copy():
    from minipar.widgets import classic_script
    from minipar.widgets.context_parallel import cp_explorer

    assert 'registerExplorer("cp-layer"' in classic_script("context_parallel")
    w = cp_explorer(cp=8)
    html = w._repr_mimebundle_()[0]["text/html"]
    assert (
        'registerExplorer("cp-layer"' in html and "mountExplorer(document.getElementById(" in html
    )
    assert (
        "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
        and "https://" not in html
    )  # works offline: nothing is fetched


def test_closed_forms_equal_the_loops():
    """The explorer's O(cp) closed forms (per-step maxima of the causal pairs; per-step maxima of
    a causal document mask over equal documents that line up with the chunks) equal Python's
    loops over every (step, rank), at every power-of-two packing of small sequences."""
    from minipar.cost.chapters import context_parallel as C

    cases, want = [], []
    for cp in (1, 2, 4, 8):
        for lay in ("contiguous", "zigzag", "striped"):
            for causal in (True, False):
                for dg in ("half", "whole"):
                    cases.append(("stepMaxima", [cp, lay, causal, dg]))
                    rows = [C.step_pairs(r, cp, lay, causal, dg) for r in range(cp)]
                    want.append([max(w[i] for w in rows) for i in range(cp)])
    for s in (16, 64, 256):
        for cp in (1, 2, 4, 8):
            for lay in ("contiguous", "zigzag"):
                L = 1
                while L <= s:
                    work = C.document_step_work(s, cp, lay, [L] * (s // L))
                    cases.append(("equalDocumentStepMaxima", [s, cp, lay, L]))
                    want.append([max(row) for row in work])
                    L *= 2
    got = js_call("context_parallel", cases)
    bad = [(c, g, w) for c, (_, g), w in zip(cases, got, want) if g != w]
    assert not bad, bad[:3]
    assert len(cases) > 150


@pytest.mark.slow
def test_document_times_at_powers_of_two_and_large_cp():
    """documentAttentionTimes' closed form (equal documents on the chunk grid) against Python's
    loop at cp up to 64, one to many documents per chunk and many chunks per document."""
    from minipar.cost.chapters import context_parallel as C

    cases = [
        dict(
            b=1,
            s=s,
            h=16384,
            cp=cp,
            documents=[s // n] * n,
            flops=989.4e12,
            bandwidth=w,
            alpha=5e-6,
            layout=lay,
            bytes_per_elem=2,
            h_kv=1024,
            algorithm="ring",
        )
        for s in (8192,)
        for cp in (2, 16, 64)
        for n in (1, 8, 1024)  # one document, several per chunk, many chunks per document
        for w in (50e9,)  # the bandwidth scales a term, it does not change the closed form
        for lay in ("zigzag", "contiguous")
    ]
    assert_parity(
        "context_parallel",
        "documentAttentionTimes",
        on_shape(C.document_attention_times),
        list(map(shaped, cases)),
    )


def _iterations(values):
    from minipar.widgets.context_parallel import cp_config

    calls = [("cpWorkReset", []), ("drawExplorer", ["cp-layer", values, cp_config(), "cp"])]
    calls.append(("cpWorkCount", []))
    (_, _), (_, out), (_, count) = js_call("context_parallel", calls)
    return out, count


@pytest.mark.slow
def test_the_largest_accepted_inputs_cost_bounded_work():
    """The explorer froze the tab at large cp: its models looped over every (step, rank) and
    every document (cp = 2048 with 1,024 documents: ~4·10⁹ visits). Now cp is at most 1,024 and
    every model it draws is O(cp): at the largest accepted values of every box the loops run a
    few thousand iterations (counted, not timed)."""
    worst = []
    for s in (8192, 1048576):
        for lay in ("zigzag", "contiguous", "striped"):
            for n in (1, 2, 1024):
                out, count = _iterations(
                    {
                        "s": s,
                        "cp": 1024,
                        "layout": lay,
                        "documents": n,
                        "b": 1024,
                        "h": 131072,
                        "a": 1024,
                        "a_kv": 1024,
                    }
                )
                assert out["error"] is None, out["error"]
                worst.append(count)
    assert max(worst) <= 40 * 1024, max(worst)
    # the counter sees the quadratic path: a packing off the chunk grid visits every (step, rank)
    from minipar.cost.chapters import context_parallel as C

    calls = [
        ("cpWorkReset", []),
        ("documentAttentionTimes", [dict(b=1, s=1920, h=48, cp=8), [384] * 5, 1e12, 1e9, 0]),
        ("cpWorkCount", []),
    ]
    (_, _), (_, t), (_, count) = js_call("context_parallel", calls)
    assert count >= 8 * 8
    assert t["ring"] == pytest.approx(
        C.document_attention_times(
            C.AttentionShape(1, 1920, 48, 8), [384] * 5, flops=1e12, bandwidth=1e9
        )["ring"],
        rel=1e-12,
    )


def test_cp_over_its_bound_is_refused_with_the_labels_on_screen():
    from minipar.widgets.context_parallel import MAX_CP, cp_config, cp_explorer, cp_layer_model

    cfg = cp_config()
    bad = {
        2048: f"cp (2048) must be at most {MAX_CP}",
        65536: f"cp (65536) must be at most {MAX_CP}",
        10_000_000: f"cp (10000000) must be at most {MAX_CP}",
    }
    got = js_call(
        "context_parallel", [("drawExplorer", ["cp-layer", {"cp": n}, cfg, "cp"]) for n in bad]
    )
    for (n, msg), (_, out) in zip(bad.items(), got):
        assert out["error"] == msg
        with pytest.raises(ValueError, match=re.escape(msg)):
            cp_explorer(cp=n)
        with pytest.raises(ValueError, match=re.escape(msg)):
            cp_layer_model(cp=n)
    ((_, limit),) = js_call("context_parallel", [("explorerInputs", ["cp-layer"])])
    maxima = {c["name"]: c.get("max") for c in limit["controls"] if c["type"] == "number"}
    assert maxima == {
        "cp": MAX_CP,
        "h": 131072,
        "a": 1024,
        "a_kv": 1024,
        "b": 1024,
        "documents": 1024,
    }


def test_documents_box_is_disabled_for_striped_shards_where_it_changes_no_time():
    from minipar.widgets.context_parallel import cp_layer_model

    got = js_call("context_parallel", [("cpDisabled", [{"layout": lay}]) for lay in LAYOUTS[:3]])
    assert [g for _, g in got] == [[], [], ["documents"]]
    a, b = (cp_layer_model(layout="striped", documents=n) for n in (1, 8))
    assert a["document_times"] is b["document_times"] is None
    assert {k: v for k, v in a.items() if k != "document_length"} == {
        k: v for k, v in b.items() if k != "document_length"
    }
