"""The emulator's Kubernetes-compatible HTTPS API server (kubectl and client libraries talk to it).

What it serves (see `app.ApiServer`): discovery (legacy and aggregated apidiscovery.k8s.io/v2),
OpenAPI v2 (JSON and gnostic protobuf) and v3, REST verbs for every type in `emulator.resources`
with label/field selectors, paging, watch (bookmarks, initial events, 410 for compacted versions),
server-side printing (Table), metrics.k8s.io from the usage model, the models' extra routes, and
JSON, YAML and (for the kinds kubectl builds itself) protobuf request bodies. Semantics live in
`emulator.api.Api`; `runner.serve` puts the server, the instance-metadata endpoint and the engine
on one event loop.

Not served: exec/attach/port-forward (SPDY/WebSocket streams), protobuf responses, HTTP/2.
"""

from shipshape.emulator.apiserver.app import ApiServer, ServerSettings
from shipshape.emulator.apiserver.runner import Served, serve

__all__ = ["ApiServer", "Served", "ServerSettings", "serve"]
