"""Output of the listing commands, as kubectl prints it: `-o wide`, `-o json`, `-o yaml`.

Tables are plain aligned columns, never cut or wrapped: a pod or node name is what the user types
next, so it is printed whole whatever the terminal's width (in a pipe or a CI log as well).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from typing import Any

import typer

GAP = "   "


class Format(enum.StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OUTPUT_HELP = "Output format: table (default), wide (every column), json or yaml."


def chosen(output: Format | None, json_flag: bool) -> Format:
    """`-o` wins; `--json` is the older spelling of `-o json`."""
    if output is not None:
        return output
    return Format.json if json_flag else Format.table


def columns(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Aligned lines: a header and one line per row, cells padded to the widest, nothing cut."""
    table = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    aligned_right = set(right)
    lines = []
    for row in table:
        cells = [
            cell.rjust(widths[i]) if i in aligned_right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append(GAP.join(cells).rstrip())
    return lines


def print_table(
    title: str | None, headers: Sequence[str], rows: Iterable[Sequence[str]], right: Iterable[int] = ()
) -> None:
    if title:
        typer.echo(title)
    for line in columns(headers, rows, right):
        typer.echo(line)


def print_document(body: Any, fmt: Format) -> None:
    """A report as JSON or YAML on stdout."""
    if fmt is Format.yaml:
        import yaml

        typer.echo(yaml.safe_dump(body, sort_keys=False, allow_unicode=True), nl=False)
    else:
        typer.echo(json.dumps(body, indent=2))


def print_unclipped(console: Any, renderable: Any) -> None:
    """A rich table at its natural width even where the console is narrower (a pipe, a CI log, a
    small terminal): rich would otherwise shorten its cells to `strat…` to fit."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update(width=100_000), renderable).maximum
    if natural <= console.width:
        console.print(renderable)
        return
    saved = console.width
    console.width = natural
    try:
        console.print(renderable)
    finally:
        console.width = saved
