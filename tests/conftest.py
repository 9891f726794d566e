"""Shared test fixtures: the real data beside the checkout (../shared) and small helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TESTS = Path(__file__).resolve().parent  #: tests/ mirrors the packages: tests/ir, tests/grammar, tests/passes...
DATA = TESTS / "data"

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"../shared is missing beside the checkout ({SHARED}); CI provides it")
    return SHARED


def pytest_terminal_summary(terminalreporter):
    """Print the figures tests record with ``record_property`` (they come back from xdist workers too)."""
    lines = []
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        if report.when == "call":
            lines += [f"{key}: {value}" for key, value in report.user_properties]
    if lines:
        terminalreporter.section("figures")
        for line in sorted(lines):
            terminalreporter.write_line(line)
