"""GPU kernels and their constants: GEMM, attention and element-wise time, the GPU and link presets."""
