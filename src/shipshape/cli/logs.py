"""Logging for long-running commands: one line per record, `text` (key=value) or `json`, quiet by default.

Structured fields travel as `extra={...}` on a record: the JSON formatter (python-json-logger) writes
them as fields of the line's object, the text formatter appends them as `key=value`. Clients' per-request
lines (httpx's "HTTP Request: ...", urllib3's connections, uvicorn's access log) are kept out unless
the level is `debug`.

Every line goes through `Redact` first: bearer credentials, Shipshape keys and tokens and passwords in
URLs are masked in the message, in string fields and in tracebacks, whoever logged them.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, Literal

LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error")
# Loggers that write a line per HTTP request or connection (Alembic: per check of the schema).
CHATTY = (
    "httpx",
    "httpcore",
    "urllib3",
    "kubernetes.client.rest",
    "uvicorn.access",
    "uvicorn.error",
    "alembic.runtime.migration",
)
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


# What must never reach a log line, each with what it becomes.
_SECRETS = (
    # Authorization header values (credentials are long: prose like "basic checks" stays).
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=_-]{12,}"), r"\1\2***"),
    # Shipshape's user API keys and agent tokens: the id (not secret) stays, the secret goes.
    (re.compile(r"\b(ss[kt]_[0-9a-f]{12}_)[A-Za-z0-9_-]+"), r"\1***"),
    # user:password@ in URLs (database and queue URLs).
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@"), r"\1***@"),
)


def redact(text: str) -> str:
    """`text` with credentials, authorization values and URL passwords masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class Redact(logging.Filter):
    """Masks secrets in a record's message, its string fields and its traceback (see `redact`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        for key, value in extras(record).items():
            if isinstance(value, str):
                setattr(record, key, redact(value))
        if record.exc_info:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def extras(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record was logged with (`extra=`), in the order they were given."""
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD}


def _quoted(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if text == "" or any(c in text for c in ' "='):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


class KeyValueFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger> <message> key=value ...` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = extras(record)
        if fields:
            head, sep, tail = line.partition("\n")  # a traceback stays below the fields
            line = head + " " + " ".join(f"{k}={_quoted(v)}" for k, v in fields.items()) + sep + tail
        return line


def configure(level: str = "info", fmt: LogFormat = "text") -> None:
    """Set up the root logger once, for a process's entry point."""
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    elif fmt == "text":
        handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    else:
        raise ValueError(f"log format must be text or json, not {fmt!r}")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler.addFilter(Redact())
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
