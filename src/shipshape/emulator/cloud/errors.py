"""Requests the cloud refuses, with the HTTP status its control API answers them with."""

from __future__ import annotations


class CloudError(Exception):
    """Bad input for the cloud (400): nothing was changed."""

    code = 400


class UnknownTarget(CloudError):
    """A node, pool or zone the cloud does not have (404)."""

    code = 404
