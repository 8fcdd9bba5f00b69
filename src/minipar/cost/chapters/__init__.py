"""Each chapter's cost model: memory and time, data, tensor, pipeline, context and expert parallelism."""
