"""Kubernetes primitives shared by every part: typed readings of bodies (objects, workloads,
IntOrString), well-known names, quantities, selectors, scheduling predicates, API errors, clocks.

Those do no I/O; the emulator, the controller, the agent and the analyzers all speak them. `client`,
`informers`, `sources` and `leader` (Lease leader election) are the one place that talks to an API
server through the official client.
"""
