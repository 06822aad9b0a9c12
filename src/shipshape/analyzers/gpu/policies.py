"""Names of the replay's placement policies (no numpy here: the CLI lists them in its help)."""

from __future__ import annotations

POLICIES = (
    "random",
    "dotprod",
    "gpu-clustering",
    "gpu-packing",
    "best-fit",
    "fgd",
    "first-fit",
    "spread",
    "fgd-cpu",
)
PAPER_POLICIES = POLICIES[:6]
TIES = ("first", "random")
