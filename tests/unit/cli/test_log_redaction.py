"""Secrets never reach a log line: credentials, Authorization values and URL passwords are masked in
messages, in structured fields and in tracebacks; everything else is left as it was."""

from __future__ import annotations

import io
import json
import logging

import pytest

from shipshape.cli import logs

KEY = "ssk_0123456789ab_" + "S" * 43
TOKEN = "sst_ba9876543210_" + "T" * 40 + "-_x"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"Authorization: Bearer {TOKEN}", "Authorization: Bearer ***"),
        ("authorization: basic dXNlcjpwYXNzd29yZA==", "authorization: basic ***"),
        (f"key {KEY} refused", "key ssk_0123456789ab_*** refused"),
        ("postgresql://shipshape:p%40ss:w0rd@db:5432/x", "postgresql://shipshape:***@db:5432/x"),
        ("nats://u:secret@nats:4222?stream=S", "nats://u:***@nats:4222?stream=S"),
        (
            "postgresql://shipshape@db/x and http://h:8080/p",
            "postgresql://shipshape@db/x and http://h:8080/p",
        ),
        ("basic checks passed", "basic checks passed"),
    ],
)
def test_redact(text: str, masked: str) -> None:
    assert logs.redact(text) == masked


def test_the_filter_masks_messages_fields_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.KeyValueFormatter("%(levelname)s %(message)s"))
    handler.addFilter(logs.Redact())
    log = logging.getLogger("test.redaction")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("connecting to %s", "postgresql://u:hunter2@db/x", extra={"header": f"Bearer {KEY}"})
        try:
            raise RuntimeError(f"refused {TOKEN}")
        except RuntimeError:
            log.exception("failed", extra={"count": 3})
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert "hunter2" not in text and KEY[17:] not in text and TOKEN[17:] not in text
    assert "postgresql://u:***@db/x" in text and "header=" in text and "count=3" in text
    assert "RuntimeError: refused sst_ba9876543210_***" in text


def test_json_lines_carry_the_masked_traceback() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    logs.configure("info", "json")
    (handler,) = root.handlers
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    try:
        try:
            raise ValueError(f"bad {KEY}")
        except ValueError:
            logging.getLogger("test.json").exception("it failed")
    finally:
        root.removeHandler(handler)
        for previous in before[0]:
            root.addHandler(previous)
        root.setLevel(before[1])
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert line["message"] == "it failed" and "ValueError: bad ssk_0123456789ab_***" in line["exc_info"]
