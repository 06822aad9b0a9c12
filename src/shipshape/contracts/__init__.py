"""Versioned wire schemas shared by processes (snapshot, delta, recommendation, instruction, the node
notice, the annotation records and Shipshape's names on objects). No I/O."""
