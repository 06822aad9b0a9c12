"""`emulator up --start`: where emulated time begins and how long a fast clock stays behind the wall clock."""

from __future__ import annotations

import math

import pytest
import typer

from shipshape.cli import emulator as emulator_cli

NOW = 1_790_000_000.0


def test_start_is_a_duration_before_now_or_an_rfc3339_time() -> None:
    assert emulator_cli.emulated_start(None, NOW) == NOW
    assert emulator_cli.emulated_start("2h", NOW) == NOW - 7200
    assert emulator_cli.emulated_start("90", NOW) == NOW - 90
    assert emulator_cli.emulated_start("2026-01-01T00:00:00Z", NOW) == 1_767_225_600.0
    assert emulator_cli.emulated_start("2026-01-01T01:00:00+01:00", NOW) == 1_767_225_600.0
    for bad in ("yesterday", "2026-01-01T00:00:00", "-2h"):
        with pytest.raises(typer.BadParameter, match="neither an RFC 3339 time"):
            emulator_cli.emulated_start(bad, NOW)


@pytest.mark.parametrize(
    ("lag", "speed", "behind"),
    [
        (3600, 10, 400.0),  # 1 h ahead start at 10x: the gap closes by 9 s every real second
        (3600, 2, 3600.0),
        (0, 10, 0.0),
        (0, 1, math.inf),
        (60, 1, math.inf),
        (60, 0.5, math.inf),
        (-60, 1, 0.0),
    ],
)
def test_how_long_emulated_time_stays_behind(lag: float, speed: float, behind: float) -> None:
    assert emulator_cli.behind_wall_clock_for(NOW - lag, NOW, speed) == behind


def test_the_note_states_the_catch_up_or_the_way_to_avoid_invalid_ages() -> None:
    assert emulator_cli.clock_note(NOW, NOW, 1.0, start_given=False) is None
    assert emulator_cli.clock_note(NOW - 60, NOW, 1.0, start_given=True) is None
    ahead = emulator_cli.clock_note(NOW, NOW, 10.0, start_given=False)
    assert ahead == (
        "note: emulated time runs ahead of this machine's clock (--speed 10), so kubectl shows <invalid> "
        "ages; --start <duration> begins emulated time that far in the past"
    )
    behind = emulator_cli.clock_note(NOW - 9 * 3600, NOW, 10.0, start_given=True)
    assert behind == (
        "emulated time starts at 2026-09-21T05:13:20Z, 9h behind this machine's clock, and catches up with "
        "it in 1h (--speed 10); after that kubectl shows <invalid> ages"
    )
