"""Kubernetes primitives shared by every part: quantities, label selectors, API errors, typed bodies.

Nothing here does I/O. The emulator, the controller and the analyzers all speak these.
"""
