"""What every command does the same way: one-line errors on stderr, and checks of the files a
command will write made before any long work. Light to import (typer only)."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable
from pathlib import Path

import typer

# Exit codes: 2 for usage and input errors (as click does for bad flags), 1 for failures of the
# thing the command talks to (an unreachable API server, a port in use) or an empty result.
USAGE = 2
FAILED = 1


def one_line(text: object) -> str:
    """The text with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(str(text).split())


def fail(message: object, code: int = USAGE, *, listing: bool = False) -> typer.Exit:
    """Print `error: message` as one line on stderr; raise the returned Exit. `listing`: the message
    is a headline and one problem per line (a scenario with several invalid fields), kept as is."""
    text = str(message).rstrip() if listing else one_line(message)
    typer.echo(f"error: {text}", err=True)
    return typer.Exit(code)


def check_output_file(path: Path | None, flag: str, suffixes: Iterable[str] = (".png", ".svg")) -> None:
    """A file the command will write: its folder exists and its suffix is one it can write."""
    if path is None:
        return
    allowed = tuple(suffixes)
    if allowed and path.suffix.lower() not in allowed:
        raise fail(f"{flag}: the file must end in {' or '.join(allowed)}, not {path.name!r}")
    folder = path.parent
    if not folder.is_dir():
        raise fail(f"{flag}: the folder {folder} does not exist")
    if path.is_dir():
        raise fail(f"{flag}: {path} is a folder")


def os_reason(error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return "the port is in use (choose another with --port, or leave it out for a free one)"
    return error.strerror or str(error)


def serving_port(port: int | None, host: str = "127.0.0.1") -> int:
    """The port to serve on: `port` when given, checked free; else one the system says is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port or 0))
        except OSError as error:
            raise fail(f"cannot serve on port {port}: {os_reason(error)}", FAILED) from None
        chosen: int = probe.getsockname()[1]
    return chosen
