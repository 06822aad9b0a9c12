"""Efficiency analyzers: one usage interface (`usage`), QoS colocation after Koordinator (`qos`),
right-sizing strategies (`rightsizing`) and the whole analysis with findings (`analysis`).

Pure: numpy arrays and Kubernetes JSON in, typed reports out. Charts live in `charts` (matplotlib,
imported only when drawing).
"""
