"""Explorer for the expert-parallel chapter: one MoE layer's rows per rank, all-to-all bytes and
time, the share of the dispatch that leaves a node (set by x and the GPUs per node, not by the
number of experts) and expert memory per rank.

``widgets/expert_parallel.js`` is the JavaScript twin of
:func:`minipar.cost.chapters.expert_parallel.ep_layer_model` (GShard §2.2 and §3.2; Switch §2.2;
the pairwise-exchange all-to-all of Thakur et al. 2005), checked by
tests/test_expert_parallel_explorer.py.
"""

from __future__ import annotations

from minipar.widgets import Explorer, links_config


def ep_config() -> dict:
    return {"links": links_config()}


def ep_explorer(**values):
    """The live explorer; ``values`` override the default controls."""
    return Explorer("expert_parallel", "ep-layer", config=ep_config(), values=values)
