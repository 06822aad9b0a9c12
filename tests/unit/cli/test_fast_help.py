"""`shipshape --help` and `--version` import none of the heavy modules (so they answer at once), and
every registered command still loads and shows its own help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from shipshape import __version__
from shipshape.cli import main

HEAVY = (
    "kubernetes",
    "matplotlib",
    "numpy",
    "shipshape.emulator",
    "uvicorn",
    "starlette",
    "prometheus_client",
    "sqlalchemy",
    "fastapi",
    "httpx",
    "shipshape.controller",
    "shipshape.backend",
    "shipshape.agent",
)

PROBE = """
import json, sys
from shipshape.cli.main import app
code = None
try:
    app(sys.argv[1:], prog_name="shipshape")
except SystemExit as done:
    code = done.code
heavy = sorted({m for m in sys.modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)})
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def _probe(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    result: dict[str, object] = json.loads(done.stderr.strip().splitlines()[-1])
    result["stdout"] = done.stdout
    return result


@pytest.mark.parametrize("args", [["--help"], ["--version"], []])
def test_top_level_help_and_version_import_nothing_heavy(args: list[str]) -> None:
    result = _probe(*args)
    assert result["heavy"] == []
    assert result["code"] in (0, None, 2)  # no arguments: help, with click's usage exit code


def test_help_lists_every_command_and_version_prints_it() -> None:
    result = _probe("--help")
    for name in [*main.COMMANDS, "version"]:
        assert name in str(result["stdout"])
    assert _probe("--version")["stdout"] == f"shipshape {__version__}\n"


@pytest.mark.parametrize("name", sorted(main.COMMANDS))
def test_every_registered_command_loads_and_has_help(name: str) -> None:
    result = CliRunner().invoke(main.app, [name, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert f"shipshape {name}" in result.output


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main.app, ["nope"])
    assert result.exit_code == 2
    assert "No such command 'nope'" in result.output
