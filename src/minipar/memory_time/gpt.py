"""The GPT this chapter measures lives in :mod:`minipar.model` (one model module for the whole
course); these names are kept so ``from minipar.memory_time.gpt import ...`` in the
chapter's notebook and exercises keeps working."""

from minipar.model import GPT, GPTConfig, Layer, attention_core, gpt

__all__ = ["GPT", "GPTConfig", "Layer", "attention_core", "gpt"]
