"""Pure analyzers: (cluster state, usage, settings, clock) -> findings. No I/O."""
