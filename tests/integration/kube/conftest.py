"""Fixtures for tests against a served emulator."""

from tests.emulator_fixtures import served_emulator

__all__ = ["served_emulator"]
