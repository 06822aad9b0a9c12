"""GPU analyzers: trace replay of GPU-sharing placement policies, inventory, allocation, idle GPUs,
waste and advice. Pure: callers read files and metrics and hand in typed values."""
