"""Start-up latency analysis for pods and nodes: phase timelines, aggregates, SLI/SLO, diagnosis.

Pure functions over Kubernetes JSON (pods, core/v1 events, nodes) and node-side timelines; no I/O.
Charts live in `charts` and Prometheus exposition in `prometheus`; import them explicitly.
"""
