"""The network: collectives' time and bytes on a link (alpha-beta, ring, tree, hierarchical)."""
