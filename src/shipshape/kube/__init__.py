"""Kubernetes primitives shared by every part: quantities, label selectors, API errors, typed bodies.

The emulator, the controller, the agent and the analyzers all speak these. Only the edge modules
`client.py`, `informers.py` and `leader.py` (Lease leader election) talk to an API server.
"""
