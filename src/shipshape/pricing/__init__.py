"""Instance prices and spot interruption bands (the shipped catalog): data and pure lookups, read by
the emulator's cloud, the simulator, the analyzers' callers and the backend."""
