"""Content negotiation and (de)serialisation: JSON (orjson) and YAML in, JSON/YAML/Table out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import yaml

from shipshape.emulator.apiserver import protobuf
from shipshape.kube import errors

JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's limit for a request body


class NotAcceptable(errors.ApiError):
    code = 406
    reason = "NotAcceptable"


@dataclass(frozen=True, slots=True)
class Wanted:
    """What representation the client asked for."""

    media_type: str = JSON  # JSON or YAML
    as_kind: str = ""  # "" (the object), "Table", "PartialObjectMetadata" or "PartialObjectMetadataList"


def _media_ranges(accept: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for part in accept.split(","):
        pieces = [p.strip() for p in part.split(";")]
        if not pieces[0]:
            continue
        params = {}
        for piece in pieces[1:]:
            key, _, value = piece.partition("=")
            params[key.strip()] = value.strip()
        out.append((pieces[0].lower(), params))
    return out


def negotiate(accept: str | None) -> Wanted:
    """Pick the first acceptable representation from an Accept header, as the API server does."""
    if not accept:
        return Wanted()
    ranges = _media_ranges(accept)
    if not ranges:
        return Wanted()
    for media_type, params in ranges:
        if media_type in (JSON, "*/*", "application/*"):
            as_kind = params.get("as", "")
            if as_kind:
                if params.get("g") != "meta.k8s.io" or params.get("v") not in ("v1", "v1beta1"):
                    continue
                if as_kind not in ("Table", "PartialObjectMetadata", "PartialObjectMetadataList"):
                    continue
            return Wanted(JSON, as_kind)
        if media_type == YAML and not params.get("as"):
            return Wanted(YAML)
    raise NotAcceptable(f"only the following media types are accepted: {JSON}, {YAML}")


def dumps(obj: Any, wanted: Wanted | None = None) -> bytes:
    if wanted is not None and wanted.media_type == YAML:
        return yaml.safe_dump(obj, sort_keys=False).encode()
    return orjson.dumps(obj)


def loads_body(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """Decode a request body into a JSON object; BadRequest for anything malformed."""
    media_type = (content_type or JSON).split(";")[0].strip().lower()
    if media_type in (YAML, "application/x-yaml", "text/yaml"):
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise errors.BadRequest(f"error converting YAML to JSON: {exc}") from None
    elif media_type in (JSON, "*/*", ""):
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise errors.BadRequest(
                f"couldn't get version/kind; json parse error: {exc.msg} at offset {exc.pos}"
            ) from None
    elif media_type == PROTOBUF:
        data = protobuf.decode(raw)
    else:
        raise errors.UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: "
            f"{JSON}, {YAML}, {PROTOBUF}"
        )
    if not isinstance(data, dict):
        raise errors.BadRequest(f"the body of the request must be a JSON object, got {type(data).__name__}")
    return data
