"""One model module: every chapter's GPT, config and token batches come from
:mod:`minipar.model`, and the chapters that split the GPT start from its weights."""

import ast
from pathlib import Path

import torch

from minipar import model
from minipar.model import GPTConfig, gpt, token_batches

SRC = Path(__file__).resolve().parents[1] / "src" / "minipar"
NAMES = {"GPT", "GPTConfig", "Layer", "attention_core", "gpt", "token_batches"}
# Imports other owners still have to switch to minipar.model; each entry must disappear with
# its fix (the test checks every entry is still a real import, so a stale one fails too).
PENDING: set[tuple[str, str]] = set()


def chapter(module: str) -> str:
    """minipar.<slug>.x and minipar.{grading,widgets,bench}.<slug> belong to chapter <slug>."""
    parts = module.split(".")[1:]
    if parts and parts[0] in ("grading", "widgets", "bench") and len(parts) > 1:
        return parts[1]
    return parts[0] if parts else ""


def foreign_model_imports(source: str, importer: str) -> set[tuple[str, str]]:
    """(importer, module) for every ``from module import <model name>`` where module is not
    minipar.model and belongs to another chapter (memory_time.gpt is that chapter's alias)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if (
            not isinstance(node, ast.ImportFrom)
            or node.level
            or not node.module
            or not node.module.startswith("minipar.")
            or node.module == "minipar.model"
        ):
            continue
        if not NAMES & {a.name for a in node.names}:
            continue
        if chapter(node.module) != chapter(importer):
            out.add((importer, node.module))
    return out


def all_foreign_imports() -> set[tuple[str, str]]:
    found = set()
    for f in SRC.rglob("*.py"):
        name = ".".join(("minipar",) + f.relative_to(SRC).with_suffix("").parts)
        if name != "minipar.memory_time.gpt":
            found |= foreign_model_imports(f.read_text(), name)
    return found


def test_no_chapter_takes_its_gpt_from_another_chapter():
    found = all_foreign_imports()
    assert found - PENDING == set(), f"import these from minipar.model: {sorted(found - PENDING)}"
    assert PENDING <= found, f"fixed, drop from PENDING: {sorted(PENDING - found)}"
    # negative control: the check sees the old cross-chapter imports
    bad = (
        "from minipar.memory_time.gpt import GPT\nfrom minipar.pipeline_parallel.train "
        "import small_config, token_batches\nfrom minipar.model import gpt\n"
    )
    assert foreign_model_imports(bad, "minipar.three_d.train") == {
        ("minipar.three_d.train", "minipar.memory_time.gpt"),
        ("minipar.three_d.train", "minipar.pipeline_parallel.train"),
    }
    assert foreign_model_imports(bad.splitlines()[1], "minipar.grading.pipeline_parallel") == set()


def test_old_names_are_the_model_modules_objects():
    from minipar.memory_time import gpt as shim
    from minipar.pipeline_parallel import train

    assert (shim.GPT, shim.GPTConfig, shim.Layer, shim.gpt) == (
        model.GPT,
        model.GPTConfig,
        model.Layer,
        model.gpt,
    )
    assert train.token_batches is model.token_batches


def test_token_batches_one_generator_and_the_data_parallel_view_of_it():
    from minipar.data_parallel.models import token_batches as dp_batches

    c = GPTConfig(s=5, V=7)
    a, b = token_batches(3, 4, c), token_batches(3, 4, c)
    assert [x.shape for x, _ in a] == [(4, 5)] * 3 and all(x.max() < 7 for x, y in a)
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b))
    assert not torch.equal(a[0][0], token_batches(1, 4, c, seed=4)[0][0])
    assert not torch.equal(a[0][0], a[0][1])  # targets are a fresh draw
    # data parallel classifies single tokens: the same draws with s = 1, flattened
    one = token_batches(2, 6, GPTConfig(V=32, s=1), seed=2)
    dp = dp_batches(2, 6)
    assert [x.shape for x, _ in dp] == [(6,)] * 2
    assert all(
        torch.equal(x.view(6), u) and torch.equal(y.view(6), v) for (x, y), (u, v) in zip(one, dp)
    )


def test_pipeline_stages_split_the_model_modules_weights():
    from minipar.pipeline_parallel.stage import build_stages, reference_model

    c = GPTConfig(L=3, h=8, a=2, s=4, V=16, dropout=0.0)
    ref = gpt(c, seed=5, dtype=torch.float64)
    assert all(
        torch.equal(p, q) for p, q in zip(ref.parameters(), reference_model(c, seed=5).parameters())
    )
    (stage,) = build_stages(c, 0, 1, seed=5).values()  # p = 1: the whole GPT
    x, _ = token_batches(1, 2, c)[0]
    assert torch.equal(stage(x), ref(x))  # (2, s, V), same weights
    other = build_stages(c, 0, 1, seed=6)[0]  # control: another seed differs
    assert not torch.allclose(other(x), ref(x))


def test_the_moe_takes_its_sizes_from_the_config():
    from minipar.expert_parallel.moe import MoE

    c = GPTConfig(h=8)
    moe = MoE.from_config(c, experts=4, top_k=2)
    assert (moe.hidden, moe.ffn, moe.w1.shape, moe.w2.shape) == (8, 32, (4, 8, 32), (4, 32, 8))
    assert MoE.from_config(c, 4, 1, ffn=12).w1.shape == (4, 8, 12)
    assert moe(torch.randn(3, c.s, c.h)).shape == (3, c.s, c.h)  # (b, s, h) in and out
