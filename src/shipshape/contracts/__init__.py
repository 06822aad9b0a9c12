"""Versioned wire schemas shared by processes (snapshot, delta, recommendation, instruction). No I/O."""
