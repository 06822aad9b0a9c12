"""The efficiency analysis at scale: a synthetic 5,000-node / 150,000-pod snapshot with a 7-day
usage window at 5-minute resolution (2,016 steps), analysed in full (right-sizing with the default
strategy, QoS colocation on every node, findings). Prints JSON.

Targets: analysis < 30 s and peak memory (the whole process, usage rows included) < 4 GiB.
Usage rows are float32: 150,000 containers x 2,016 steps x 2 resources is 2.4 GB on its own.
By default both strategies (`simple`, `vpa`) run, each in a child process, side by side with their
ratios; `--strategy NAME` runs one in this process (`--profile` adds a cProfile on stderr).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

NODES = 5_000
PODS_PER_NODE = 30
DAYS = 7
STEP = 300.0
CHUNK = 4096
GIB = 2**30
SHAPES = (("m5.2xlarge", 8, 32), ("c5.4xlarge", 16, 32), ("r5.2xlarge", 8, 64))


def build(
    seed: int, nodes_count: int = NODES
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any, dict[str, float]]:
    from shipshape.analyzers.efficiency.usage import ContainerKey, Series, UsageData, Window

    rng = np.random.default_rng(seed)
    nodes: list[dict[str, Any]] = []
    prices: dict[str, float] = {}
    for i in range(nodes_count):
        itype, cpu, memory = SHAPES[i % len(SHAPES)]
        spot = i % 3 != 0
        name = f"node-{i:05d}"
        nodes.append(
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "node.kubernetes.io/instance-type": itype,
                        "node.kubernetes.io/capacity": "spot" if spot else "on-demand",
                        "topology.kubernetes.io/zone": "us-east-1a",
                    },
                },
                "status": {
                    "capacity": {"cpu": str(cpu), "memory": f"{memory}Gi"},
                    "allocatable": {"cpu": f"{cpu * 1000 - 90}m", "memory": f"{memory * 1024 - 1600}Mi"},
                },
            }
        )
        prices[name] = (0.12 if spot else 0.38) * cpu / 8
    pods: list[dict[str, Any]] = []
    cpu_requests = np.array([0.1, 0.25, 0.5, 1.0])
    memory_requests = np.array([256, 512, 1024, 2048]) * 2**20
    workload_size = rng.integers(0, 4, 3000)  # the pods of one workload share its template
    workload_cpu = rng.uniform(0.1, 0.6, 3000)  # and behave alike (share of the request used)
    workload_memory = rng.uniform(0.3, 0.8, 3000)
    choice = workload_size[np.arange(nodes_count * PODS_PER_NODE) % 3000]
    keys: list[ContainerKey] = []
    for n in range(nodes_count):
        for j in range(PODS_PER_NODE):
            index = n * PODS_PER_NODE + j
            job = index % 10 == 0
            workload = f"app-{index % 3000:04d}"
            name = f"{workload}-{index:06d}"
            size = int(choice[index])
            owner = (
                {"kind": "Job", "name": f"job-{index}", "controller": True}
                if job
                else {"kind": "ReplicaSet", "name": f"{workload}-5d8f", "controller": True}
            )
            pods.append(
                {
                    "metadata": {
                        "name": name,
                        "namespace": f"team-{index % 40}",
                        "labels": {} if job else {"pod-template-hash": "5d8f"},
                        "ownerReferences": [owner],
                    },
                    "spec": {
                        "nodeName": f"node-{n:05d}",
                        "containers": [
                            {
                                "name": "main",
                                "resources": {
                                    "requests": {
                                        "cpu": f"{int(cpu_requests[size] * 1000)}m",
                                        "memory": str(int(memory_requests[size])),
                                    },
                                    "limits": {"memory": str(int(memory_requests[size]))},
                                },
                            }
                        ],
                    },
                    "status": {"phase": "Running"},
                }
            )
            keys.append(ContainerKey(f"team-{index % 40}", name, "main"))
    steps = int(DAYS * 86400 / STEP)
    window = Window(1_767_225_600.0, STEP, steps)
    times = window.times()
    wave = (1 - 0.3 * np.cos(2 * np.pi * (times - times[0]) / 86400.0)).astype(np.float32)
    rows = len(keys)
    cpu = np.empty((rows, steps), dtype=np.float32)
    memory = np.empty((rows, steps), dtype=np.float32)
    node_cpu = np.zeros((nodes_count, steps), dtype=np.float32)
    node_memory = np.zeros((nodes_count, steps), dtype=np.float32)
    for start in range(0, rows, CHUNK):
        stop = min(rows, start + CHUNK)
        size = choice[start:stop]
        workload = np.arange(start, stop) % 3000
        spread = rng.uniform(0.9, 1.1, stop - start)
        level = (cpu_requests[size] * workload_cpu[workload] * spread).astype(np.float32)
        noise = rng.random((stop - start, steps), dtype=np.float32)
        cpu[start:stop] = level[:, None] * wave[None, :] * (0.9 + 0.2 * noise)
        mlevel = (memory_requests[size] * workload_memory[workload] * spread).astype(np.float32)
        memory[start:stop] = mlevel[:, None] * (0.98 + 0.04 * noise)
        gaps = rng.random(stop - start) < 0.01
        cpu[start:stop][gaps, :100] = np.nan
        owner_nodes = np.arange(start, stop) // PODS_PER_NODE
        cuts = np.flatnonzero(np.r_[True, owner_nodes[1:] != owner_nodes[:-1]])
        np.add.at(node_cpu, owner_nodes[cuts], np.add.reduceat(np.nan_to_num(cpu[start:stop]), cuts, axis=0))
        np.add.at(node_memory, owner_nodes[cuts], np.add.reduceat(memory[start:stop], cuts, axis=0))
    node_cpu += 0.1
    node_memory += 512 * 2**20
    usage = UsageData(
        window,
        Series(tuple(keys), cpu, memory),
        Series(tuple(n["metadata"]["name"] for n in nodes), node_cpu, node_memory),
        "synthetic",
    )
    return pods, nodes, usage, prices


def compare(args: argparse.Namespace) -> None:
    """Each strategy in a child process of its own (its own peak memory), side by side."""
    cases = []
    for strategy in ("simple", "vpa"):
        command = [
            sys.executable,
            __file__,
            "--strategy",
            strategy,
            "--seed",
            str(args.seed),
            "--nodes",
            str(args.nodes),
        ]
        print(f"analyzers: {strategy} ...", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        cases.append(json.loads(done.stdout))
    simple, vpa = cases
    result = {
        "benchmark": "analyzers",
        "cases": cases,
        "ratios": {
            "vpa_over_simple_analysis_cpu": round(
                vpa["analysis_cpu_seconds"] / simple["analysis_cpu_seconds"], 2
            ),
            "vpa_over_simple_peak_rss": round(vpa["peak_rss_mib"] / simple["peak_rss_mib"], 2),
        },
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--strategy", default=None, help="one strategy in this process (default: both, compared)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=NODES, help="30 pods each")
    parser.add_argument("--profile", action="store_true", help="print the analysis's cProfile to stderr")
    args = parser.parse_args()
    if args.strategy is None and not args.profile:
        compare(args)
        return
    args.strategy = args.strategy or "simple"
    from shipshape.analyzers.efficiency import analysis
    from shipshape.analyzers.efficiency.cluster import read_cluster

    started = time.perf_counter()
    cpu_started = time.process_time()
    pods, nodes, usage, prices = build(args.seed, args.nodes)
    built = time.perf_counter()
    cpu_built = time.process_time()
    peak_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cluster = read_cluster(pods, nodes)
    read = time.perf_counter()
    report = analysis.analyze(
        pods,
        nodes,
        usage,
        node_prices=prices,
        cluster=cluster,
        settings=analysis.AnalysisSettings(strategy=args.strategy),
    )
    done = time.perf_counter()
    cpu_done = time.process_time()
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    result = {
        "benchmark": "analyzers",
        "nodes": len(nodes),
        "pods": len(pods),
        "steps": usage.window.steps,
        "step_seconds": usage.window.step,
        "strategy": args.strategy,
        "numpy": np.__version__,
        "build_seconds": round(built - started, 2),
        "read_cluster_seconds": round(read - built, 2),
        "analyze_seconds": round(done - read, 2),
        "analysis_seconds": round(done - built, 2),
        "analysis_cpu_seconds": round(cpu_done - cpu_built, 2),  # wall time is noisy on a shared machine
        "build_cpu_seconds": round(cpu_built - cpu_started, 2),
        "peak_rss_mib": round(peak),
        "peak_rss_after_build_mib": round(peak_built),
        "usage_rows_mib": round((usage.containers.cpu.nbytes + usage.containers.memory.nbytes) / 2**20),
        "findings": len(report.findings),
        "workload_containers": len(report.recommendations),
        "monthly_savings_usd": round(report.monthly_savings, 2),
        "batch_cpu_cores": round(report.colocation.batch_cpu_total, 1),
        "oom_replay_kills": report.oom_replay_kills,
        "targets": {"analysis_seconds": 30, "peak_rss_mib": 4096},
        "met": {"time": done - built < 30, "memory": peak < 4096},
    }
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
