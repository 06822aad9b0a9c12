"""`shipshape node-notices`: publish this node's termination notices from its instance metadata.

Runs on every node (a DaemonSet with `NODE_NAME` from the downward API, in-cluster credentials when
`--kubeconfig` is absent). RBAC: get and patch `nodes`, patch `nodes/status`, create `events`.
"""

from __future__ import annotations

from pathlib import Path

import typer

CLOUD_CHOICES = ("auto", "aws", "gcp", "azure")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def node_notices(
    node_name: str = typer.Option(
        "", "--node-name", envvar="NODE_NAME", help="This node's name (NODE_NAME in a DaemonSet)."
    ),
    cloud: str = typer.Option("auto", "--cloud", help="auto, aws, gcp or azure."),
    metadata_url: str | None = typer.Option(
        None,
        "--metadata-url",
        help="Base URL of the instance metadata service (default: the cloud's, e.g. http://169.254.169.254).",
    ),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="Kubeconfig (default: in-cluster)."),
    interval: str = typer.Option("2s", "--interval", help="Time between polls, e.g. 2s or 500ms."),
    once: bool = typer.Option(False, "--once", help="Poll once, publish what is there, and exit."),
) -> None:
    """Poll the instance metadata (AWS IMDSv2, GCP, Azure Scheduled Events) and publish a spot
    termination notice on this Node: taint, condition and Event."""
    import logging
    import signal
    import threading
    import time

    import httpx

    from shipshape.kube import client
    from shipshape.kube.duration import DurationError, parse_duration
    from shipshape.nodecollector.notices import detect, publish
    from shipshape.nodecollector.notices.model import MetadataError
    from shipshape.nodecollector.notices.poller import NoticePoller

    if not node_name:
        raise _fail("--node-name (or NODE_NAME) is required")
    if cloud not in CLOUD_CHOICES:
        raise _fail(f"--cloud must be one of {', '.join(CLOUD_CHOICES)}, got {cloud!r}")
    try:
        seconds = parse_duration(interval)
    except DurationError as error:
        raise _fail(f"--interval: {error}") from error
    if seconds <= 0:
        raise _fail(f"--interval must be positive, got {interval!r}")
    if metadata_url is not None and not metadata_url.startswith(("http://", "https://")):
        raise _fail(f"--metadata-url must be an http:// or https:// URL, got {metadata_url!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        api = client.load_api_client(kubeconfig)
        node = client.get_node(api, node_name)
    except client.KubeClientError as error:
        message = f"node {node_name} not found" if error.status == 404 else str(error)
        raise _fail(message) from error
    http = httpx.Client(timeout=5.0)
    try:
        if cloud == "auto":
            provider = str((node.get("spec") or {}).get("providerID") or "")
            source = detect.detect(http, metadata_url, provider, time.monotonic)
        else:
            source = detect.source_for(cloud, http, metadata_url, time.monotonic)
    except MetadataError as error:
        http.close()
        raise _fail(str(error)) from error
    poller = NoticePoller(source, publish.NodeWriter(api, node_name), time.time, seconds)
    typer.echo(
        f"node-notices: node {node_name}, {source.cloud} instance metadata at "
        f"{metadata_url or 'the default address'}, every {seconds:g}s"
    )
    try:
        if once:
            if not poller.step():
                raise typer.Exit(1)
            return
        stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
        poller.run(stopped.is_set, stopped.wait)
    finally:
        http.close()
