"""`shipshape agent --prometheus`: a URL that is not http(s), or GPU activity without the usage it
rides on, is one error line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from shipshape.cli.main import app


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prometheus", "prometheus:9090"], "--prometheus must be an http(s):// URL, not prometheus:9090"),
        (
            ["--prometheus", "http://prometheus:9090", "--no-usage"],
            "--prometheus adds GPU activity to the usage",
        ),
        (["--prometheus", "http://prometheus:9090", "--prometheus-timeout", "soon"], "soon"),
    ],
)
def test_bad_prometheus_flags_are_one_error_line(extra: list[str], message: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken")
    result = CliRunner().invoke(
        app,
        ["agent", "--backend", "http://127.0.0.1:9", "--token-file", str(token), *extra],
        env={"COLUMNS": "240"},
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output
