"""Measuring where training memory goes, on a model small enough for a laptop CPU.

``gpt``: a GPT layer stack laid out as in the Megatron papers; ``model_states``: bytes of
weights, gradients and Adam state (fp32 or mixed precision); ``activations``: bytes autograd
saves for the backward pass. The notebook sets each measurement against :mod:`minipar.cost`.
"""
