"""The controller at 1,000 nodes: the large scenario for 7 emulated days with the `shipshape` strategy.

examples/scenarios/large.yaml is the reference scenario scaled to about 1,000 nodes and 3,100 pods.
Prints JSON: wall and CPU seconds of the run (target: under 120 s for 7 days), the emulated days, the
cluster's size, the outcome (cost, savings, minutes at zero ready replicas) and the machine's load
average before and after (the CPU seconds are the figure to compare on a shared machine).

    .venv/bin/python bench/scale.py [--days 7] [--scenario PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from shipshape.emulator import scenario as scenario_file
from shipshape.simulate.run import SimulationSettings, compare
from shipshape.simulate.strategies import STRATEGIES

LARGE = Path(__file__).resolve().parent.parent / "examples" / "scenarios" / "large.yaml"
TARGET_WALL_SECONDS = 120.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--scenario", type=Path, default=LARGE)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    scenario = scenario_file.load(args.scenario)
    settings = SimulationSettings(duration=args.days * 86400.0, progress_steps=1)

    def progress(name: str, done: float, total: float) -> None:
        print(f"{name}: {done / 3600:.0f} h emulated", file=sys.stderr, flush=True)

    (result,) = compare(scenario, [STRATEGIES["shipshape"]], settings, progress)
    nodes = sum(pool.initial_size for pool in scenario.pools)
    body: dict[str, Any] = {
        "benchmark": "scale",
        "scenario": scenario.name,
        "initialNodes": nodes,
        "emulatedDays": args.days,
        "wallSeconds": round(result.wall_seconds, 1),
        "cpuSeconds": None if result.cpu_seconds is None else round(result.cpu_seconds, 1),
        "cost": round(result.total_cost, 2),
        "zeroReadyMinutes": round(result.zero_ready_minutes, 2),
        "belowMinAvailableMinutes": round(result.below_min_available_minutes, 2),
        "target": {
            "wallSecondsFor7Days": TARGET_WALL_SECONDS,
            # CPU seconds scaled to 7 days: on a shared machine, wall time follows the load.
            "cpuSecondsFor7Days": None
            if result.cpu_seconds is None
            else round(result.cpu_seconds * 7.0 / args.days, 1),
            "met": result.wall_seconds * 7.0 / args.days < TARGET_WALL_SECONDS,
        },
        "loadAverage1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "cpus": os.cpu_count(),
    }
    print(json.dumps(body, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
