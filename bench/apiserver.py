"""The emulator's API server under load: pod creations over HTTPS and watch delivery latency.

Prints JSON. The server runs in its own process (the API alone, no models) so its CPU time per
request can be measured apart from the clients'; clients are separate processes with keep-alive
connections. Targets: >= 300 pod creations/s (server capacity, i.e. 1 / server CPU per create) and
watch delivery p99 < 100 ms with 20 watchers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

CREATES = 3000
CREATE_CLIENTS = 2
CONNECTIONS_PER_CLIENT = 4
WATCHERS = 20
WATCH_PROCESSES = 4  # the watchers are spread over processes so that client parsing is not the bottleneck
WATCH_EVENTS = 300
WATCH_RATE = 60.0  # changes per second while watching


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---- server process ------------------------------------------------------------------------------


def serve(kubeconfig: str) -> None:
    from shipshape.emulator import assembly
    from shipshape.emulator.apiserver import serve as serve_cluster
    from shipshape.emulator.apiserver.runner import run_loop
    from shipshape.kube.clock import RealClock

    async def main() -> None:
        cluster = assembly.build(None, RealClock(), models=False)
        async with serve_cluster(cluster, kubeconfig=Path(kubeconfig)):
            print("ready", flush=True)
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
            while line := await reader.readline():
                if line.strip() == b"cpu":
                    print(json.dumps({"cpu": _cpu_seconds()}), flush=True)

    run_loop(main())


# ---- clients -------------------------------------------------------------------------------------


def _connection(kubeconfig: str) -> tuple[str, ssl.SSLContext, dict[str, str]]:
    config = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
        ca.write(base64.b64decode(cluster["certificate-authority-data"]))
    tls = ssl.create_default_context(cafile=ca.name)
    return cluster["server"], tls, {"Authorization": f"Bearer {config['users'][0]['user']['token']}"}


def create_pods(kubeconfig: str, prefix: str, count_text: str) -> None:
    count = int(count_text)
    import httpx

    url, tls, headers = _connection(kubeconfig)

    async def main() -> None:
        limits = httpx.Limits(max_connections=CONNECTIONS_PER_CLIENT)
        async with httpx.AsyncClient(base_url=url, verify=tls, headers=headers, limits=limits) as http:
            queue = list(range(count))

            async def worker() -> None:
                while queue:
                    i = queue.pop()
                    body = {
                        "metadata": {"name": f"{prefix}-{i}"},
                        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                    }
                    response = await http.post("/api/v1/namespaces/default/pods", json=body)
                    assert response.status_code == 201, response.text

            await asyncio.gather(*(worker() for _ in range(CONNECTIONS_PER_CLIENT)))

    asyncio.run(main())


def watch(kubeconfig: str, count_text: str) -> None:
    """Open `count` watches, print "watching", then report delivery latencies as JSON."""
    count = int(count_text)
    import httpx

    url, tls, headers = _connection(kubeconfig)

    async def main() -> list[float]:
        latencies: list[float] = []
        async with httpx.AsyncClient(base_url=url, verify=tls, headers=headers, timeout=60) as http:

            async def one(ready: asyncio.Event) -> None:
                params = {"watch": "1", "resourceVersion": "0", "timeoutSeconds": "60"}
                async with http.stream(
                    "GET", "/api/v1/namespaces/default/configmaps", params=params
                ) as stream:
                    ready.set()
                    seen = 0
                    async for line in stream.aiter_lines():
                        event = json.loads(line)
                        sent = float(event["object"]["metadata"]["annotations"]["sent"])
                        latencies.append(time.time() - sent)
                        seen += 1
                        if seen == WATCH_EVENTS:
                            return

            readies = [asyncio.Event() for _ in range(count)]
            tasks = [asyncio.create_task(one(r)) for r in readies]
            for r in readies:
                await r.wait()
            print("watching", flush=True)
            await asyncio.gather(*tasks)
        return latencies

    print(json.dumps(asyncio.run(main())), flush=True)


def write_configmaps(kubeconfig: str) -> None:
    import httpx

    url, tls, headers = _connection(kubeconfig)
    with httpx.Client(base_url=url, verify=tls, headers=headers) as http:
        start = time.monotonic()
        for i in range(WATCH_EVENTS):
            delay = start + i / WATCH_RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            body = {"metadata": {"name": f"cm-{i}", "annotations": {"sent": repr(time.time())}}}
            assert http.post("/api/v1/namespaces/default/configmaps", json=body).status_code == 201


# ---- driver --------------------------------------------------------------------------------------


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def _run(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], text=True, **kwargs)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = str(Path(tmp) / "kubeconfig")
        server = _run("serve", kubeconfig, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert server.stdin is not None and server.stdout is not None
        assert server.stdout.readline().strip() == "ready"

        def server_cpu() -> float:
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write("cpu\n")
            server.stdin.flush()
            return float(json.loads(server.stdout.readline())["cpu"])

        try:
            cpu0, t0 = server_cpu(), time.perf_counter()
            per_client = CREATES // CREATE_CLIENTS
            clients = [_run("create", kubeconfig, f"c{i}", str(per_client)) for i in range(CREATE_CLIENTS)]
            assert all(c.wait() == 0 for c in clients)
            wall, cpu = time.perf_counter() - t0, server_cpu() - cpu0
            created = per_client * CREATE_CLIENTS

            per_process = WATCHERS // WATCH_PROCESSES
            watchers = [
                _run("watch", kubeconfig, str(per_process), stdout=subprocess.PIPE)
                for _ in range(WATCH_PROCESSES)
            ]
            for w in watchers:
                assert w.stdout is not None and w.stdout.readline().strip() == "watching"
            watch_cpu0 = server_cpu()
            writer = _run("write", kubeconfig)
            assert writer.wait() == 0
            watch_cpu = server_cpu() - watch_cpu0
            latencies: list[float] = []
            for w in watchers:
                assert w.stdout is not None
                latencies += json.loads(w.stdout.readline())
                assert w.wait() == 0
        finally:
            server.kill()
            server.wait()
    result = {
        "creates": created,
        "creates_per_s_observed": round(created / wall, 1),
        "server_cpu_ms_per_create": round(cpu / created * 1000, 3),
        "server_capacity_creates_per_s": round(created / cpu, 1),
        "target_creates_per_s": 300,
        "watchers": WATCHERS,
        "watch_client_processes": WATCH_PROCESSES,
        "watch_deliveries": len(latencies),
        "server_cpu_ms_per_change_with_watchers": round(watch_cpu / WATCH_EVENTS * 1000, 3),
        "watch_latency_p50_ms": round(_percentile(latencies, 0.50) * 1000, 2),
        "watch_latency_p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
        "target_watch_p99_ms": 100,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    commands: dict[str, Any] = {
        "serve": serve,
        "create": create_pods,
        "watch": watch,
        "write": write_configmaps,
    }
    if len(sys.argv) > 1:
        commands[sys.argv[1]](*sys.argv[2:])
    else:
        main()
