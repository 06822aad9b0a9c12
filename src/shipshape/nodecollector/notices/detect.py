"""Which cloud this node runs on: its Node's `spec.providerID` when it says, else the metadata service
that answers (IMDSv2 token, `Metadata-Flavor: Google`, Azure's `Metadata: true`)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from shipshape.contracts.notices import CLOUDS
from shipshape.nodecollector.notices import aws, azure, gcp
from shipshape.nodecollector.notices.model import MetadataError
from shipshape.nodecollector.notices.poller import Source

PROVIDER_PREFIXES = {"aws://": "aws", "gce://": "gcp", "azure://": "azure"}


def cloud_of_provider_id(provider_id: str | None) -> str | None:
    """`aws:///us-east-1a/i-0abc` -> aws, `gce://project/zone/name` -> gcp, `azure:///subscriptions/...`
    -> azure; None for anything else (kind, bare metal, an unset providerID)."""
    for prefix, cloud in PROVIDER_PREFIXES.items():
        if (provider_id or "").startswith(prefix):
            return cloud
    return None


def source_for(cloud: str, http: httpx.Client, base: str | None, monotonic: Callable[[], float]) -> Source:
    """The metadata client of `cloud` at `base` (default: the cloud's link-local address)."""
    if cloud == "aws":
        return aws.Imds(http, base or aws.BASE_URL, monotonic=monotonic)
    if cloud == "gcp":
        return gcp.Gce(http, base or gcp.BASE_URL)
    if cloud == "azure":
        return azure.ScheduledEvents(http, base or azure.BASE_URL)
    raise ValueError(f"unknown cloud {cloud!r} (one of {', '.join(CLOUDS)})")


def detect(
    http: httpx.Client, base: str | None, provider_id: str | None, monotonic: Callable[[], float]
) -> Source:
    """The source for this node: the providerID's cloud, else the first metadata service that answers."""
    cloud = cloud_of_provider_id(provider_id)
    if cloud is not None:
        return source_for(cloud, http, base, monotonic)
    for candidate in CLOUDS:
        source = source_for(candidate, http, base, monotonic)
        if source.probe():
            return source
    where = base or "the link-local metadata addresses"
    raise MetadataError(
        f"no instance metadata service answers at {where} (tried {', '.join(CLOUDS)}); pass --cloud"
    )
