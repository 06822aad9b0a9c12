"""The Swagger 2.0 document in gnostic's protobuf form (`openapi_v2.Document`), as kubectl asks for it.

client-go fetches `/openapi/v2` only as `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`
(kubectl's `explain --output=plaintext-openapiv2`, and its fallback when OpenAPI v3 is missing).
This writes the JSON document with the field numbers of gnostic's `openapiv2/OpenAPIv2.proto`
(proto3: zero values are left out). Values of free form (`default`, `example`, `enum` items and
`x-` vendor extensions) travel as gnostic `Any` messages holding YAML, here JSON text (which is
YAML too).
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
# What kube-apiserver answers with ("@" is not valid in a Content-Type, and Go's mime parser says so).
RESPONSE_MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
Doc = dict[str, Any]


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def bytes_field(self, number: int, data: bytes) -> None:
        self.buf += _varint(number << 3 | 2) + _varint(len(data)) + data

    def string(self, number: int, value: Any) -> None:
        if isinstance(value, str) and value:
            self.bytes_field(number, value.encode())

    def strings(self, number: int, values: Any) -> None:
        for value in values or []:
            self.bytes_field(number, str(value).encode())

    def boolean(self, number: int, value: Any) -> None:
        if value is True:
            self.buf += _varint(number << 3) + b"\x01"

    def int64(self, number: int, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and value:
            self.buf += _varint(number << 3) + _varint(value)

    def double(self, number: int, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and value:
            self.buf += _varint(number << 3 | 1) + struct.pack("<d", float(value))

    def message(self, number: int, data: bytes) -> None:
        """An embedded message, written even when empty (presence matters for oneofs)."""
        self.bytes_field(number, data)

    def done(self) -> bytes:
        return bytes(self.buf)


def _any(value: Any) -> bytes:
    w = _Writer()
    w.string(2, orjson.dumps(value).decode())
    return w.done()


def _named(name: str, value: bytes) -> bytes:
    w = _Writer()
    w.string(1, name)
    w.message(2, value)
    return w.done()


def _extensions(w: _Writer, number: int, obj: Doc) -> None:
    for key, value in obj.items():
        if key.startswith("x-"):
            w.message(number, _named(key, _any(value)))


def _schema(s: Doc) -> bytes:
    w = _Writer()
    w.string(1, s.get("$ref"))
    w.string(2, s.get("format"))
    w.string(3, s.get("title"))
    w.string(4, s.get("description"))
    if "default" in s:
        w.message(5, _any(s["default"]))
    w.double(6, s.get("multipleOf"))
    w.double(7, s.get("maximum"))
    w.boolean(8, s.get("exclusiveMaximum"))
    w.double(9, s.get("minimum"))
    w.boolean(10, s.get("exclusiveMinimum"))
    w.int64(11, s.get("maxLength"))
    w.int64(12, s.get("minLength"))
    w.string(13, s.get("pattern"))
    w.int64(14, s.get("maxItems"))
    w.int64(15, s.get("minItems"))
    w.boolean(16, s.get("uniqueItems"))
    w.int64(17, s.get("maxProperties"))
    w.int64(18, s.get("minProperties"))
    w.strings(19, s.get("required"))
    for item in s.get("enum") or []:
        w.message(20, _any(item))
    additional = s.get("additionalProperties")
    if isinstance(additional, dict):
        inner = _Writer()
        inner.message(1, _schema(additional))
        w.message(21, inner.done())
    elif isinstance(additional, bool):
        inner = _Writer()
        inner.buf += _varint(2 << 3) + (b"\x01" if additional else b"\x00")
        w.message(21, inner.done())
    if "type" in s:
        types = _Writer()
        types.strings(1, s["type"] if isinstance(s["type"], list) else [s["type"]])
        w.message(22, types.done())
    if "items" in s:
        items = _Writer()
        for item in s["items"] if isinstance(s["items"], list) else [s["items"]]:
            items.message(1, _schema(item))
        w.message(23, items.done())
    for part in s.get("allOf") or []:
        w.message(24, _schema(part))
    if "properties" in s:
        props = _Writer()
        for name, prop in s["properties"].items():
            props.message(1, _named(name, _schema(prop)))
        w.message(25, props.done())
    w.string(26, s.get("discriminator"))
    w.boolean(27, s.get("readOnly"))
    if "example" in s:
        w.message(30, _any(s["example"]))
    _extensions(w, 31, s)
    return w.done()


def _primitives(p: Doc) -> bytes:
    w = _Writer()
    w.string(1, p.get("type"))
    w.string(2, p.get("format"))
    if "items" in p:
        w.message(3, _primitives(p["items"]))
    w.string(4, p.get("collectionFormat"))
    if "default" in p:
        w.message(5, _any(p["default"]))
    _extensions(w, 18, p)
    return w.done()


def _non_body(p: Doc) -> bytes:
    """Query, path and header parameters share a layout except where allowEmptyValue sits."""
    w = _Writer()
    location = p.get("in")
    w.boolean(1, p.get("required"))
    w.string(2, location)
    w.string(3, p.get("description"))
    w.string(4, p.get("name"))
    offset = 0
    if location in ("query", "formData"):
        w.boolean(5, p.get("allowEmptyValue"))
        offset = 1
    w.string(5 + offset, p.get("type"))
    w.string(6 + offset, p.get("format"))
    if "items" in p:
        w.message(7 + offset, _primitives(p["items"]))
    w.string(8 + offset, p.get("collectionFormat"))
    if "default" in p:
        w.message(9 + offset, _any(p["default"]))
    w.boolean(19 + offset, p.get("uniqueItems"))
    for item in p.get("enum") or []:
        w.message(20 + offset, _any(item))
    _extensions(w, 22 + offset, p)
    sub = {"header": 1, "formData": 2, "query": 3, "path": 4}.get(str(location), 3)
    outer = _Writer()
    outer.message(sub, w.done())
    return outer.done()


def _parameter(p: Doc) -> bytes:
    w = _Writer()
    if p.get("in") == "body":
        body = _Writer()
        body.string(1, p.get("description"))
        body.string(2, p.get("name"))
        body.string(3, p.get("in"))
        body.boolean(4, p.get("required"))
        if "schema" in p:
            body.message(5, _schema(p["schema"]))
        _extensions(body, 6, p)
        w.message(1, body.done())
    else:
        w.message(2, _non_body(p))
    return w.done()


def _parameters_item(p: Doc) -> bytes:
    w = _Writer()
    if "$ref" in p:
        ref = _Writer()
        ref.string(1, p["$ref"])
        w.message(2, ref.done())
    else:
        w.message(1, _parameter(p))
    return w.done()


def _responses(responses: Doc) -> bytes:
    w = _Writer()
    for code, response in responses.items():
        if code.startswith("x-"):
            continue
        value = _Writer()
        if "$ref" in response:
            ref = _Writer()
            ref.string(1, response["$ref"])
            value.message(2, ref.done())
        else:
            r = _Writer()
            r.string(1, response.get("description"))
            if "schema" in response:
                item = _Writer()
                item.message(1, _schema(response["schema"]))
                r.message(2, item.done())
            _extensions(r, 5, response)
            value.message(1, r.done())
        w.message(1, _named(code, value.done()))
    _extensions(w, 2, responses)
    return w.done()


def _operation(op: Doc) -> bytes:
    w = _Writer()
    w.strings(1, op.get("tags"))
    w.string(2, op.get("summary"))
    w.string(3, op.get("description"))
    w.string(5, op.get("operationId"))
    w.strings(6, op.get("produces"))
    w.strings(7, op.get("consumes"))
    for param in op.get("parameters") or []:
        w.message(8, _parameters_item(param))
    if "responses" in op:
        w.message(9, _responses(op["responses"]))
    w.strings(10, op.get("schemes"))
    w.boolean(11, op.get("deprecated"))
    _extensions(w, 13, op)
    return w.done()


_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _path_item(item: Doc) -> bytes:
    w = _Writer()
    w.string(1, item.get("$ref"))
    for method, number in _METHODS.items():
        if method in item:
            w.message(number, _operation(item[method]))
    for param in item.get("parameters") or []:
        w.message(9, _parameters_item(param))
    _extensions(w, 10, item)
    return w.done()


def encode_document(doc: Doc) -> bytes:
    """An `openapi_v2.Document` message for a Swagger 2.0 document."""
    w = _Writer()
    w.string(1, doc.get("swagger"))
    info = doc.get("info") or {}
    info_w = _Writer()
    info_w.string(1, info.get("title"))
    info_w.string(2, info.get("version"))
    info_w.string(3, info.get("description"))
    w.message(2, info_w.done())
    w.string(3, doc.get("host"))
    w.string(4, doc.get("basePath"))
    w.strings(5, doc.get("schemes"))
    w.strings(6, doc.get("consumes"))
    w.strings(7, doc.get("produces"))
    paths = _Writer()
    for name, item in (doc.get("paths") or {}).items():
        if name.startswith("x-"):
            paths.message(1, _named(name, _any(item)))
        else:
            paths.message(2, _named(name, _path_item(item)))
    w.message(8, paths.done())
    definitions = _Writer()
    for name, schema in (doc.get("definitions") or {}).items():
        definitions.message(1, _named(name, _schema(schema)))
    w.message(9, definitions.done())
    if doc.get("parameters"):
        params = _Writer()
        for name, param in doc["parameters"].items():
            params.message(1, _named(name, _parameter(param)))
        w.message(10, params.done())
    for requirement in doc.get("security") or []:
        req = _Writer()
        for name, scopes in requirement.items():
            array = _Writer()
            array.strings(1, scopes)
            req.message(1, _named(name, array.done()))
        w.message(12, req.done())
    if doc.get("securityDefinitions"):
        defs = _Writer()
        for name, definition in doc["securityDefinitions"].items():
            if definition.get("type") != "apiKey":
                continue
            key = _Writer()
            key.string(1, definition.get("type"))
            key.string(2, definition.get("name"))
            key.string(3, definition.get("in"))
            key.string(4, definition.get("description"))
            item = _Writer()
            item.message(2, key.done())
            defs.message(1, _named(name, item.done()))
        w.message(13, defs.done())
    _extensions(w, 16, doc)
    return w.done()
