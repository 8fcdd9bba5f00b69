"""minipar: data, tensor and pipeline parallelism, taught by running them."""

__version__ = "0.1.0"
