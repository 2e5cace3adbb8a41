"""Every `--*-port` option takes a TCP port or nothing: 0-65535 (0: any free port), checked by
`safeshare.endpoints.port_number`, so a value outside is exit 2 naming the option before anything starts (issue 24,
item 11 follow-up: `up --app-port`, `provision --gateway-port` and `kiosk --vnc-port` took any integer, and a bind
or a published port then failed late, or with an OverflowError traceback).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from safeshare.cli import build_parser
from safeshare.endpoints import port_number

REPO = Path(__file__).resolve().parents[1]


def port_options(parser: argparse.ArgumentParser, path: str = "safeshare") -> list[tuple[str, argparse.Action]]:
    """(command, action) of every option of every subcommand whose name ends in -port or is --port."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += port_options(sub, f"{path} {name}")
        elif any(option == "--port" or option.endswith("-port") for option in action.option_strings):
            found.append((path, action))
    return found


def test_every_port_option_is_checked_by_port_number() -> None:
    options = port_options(build_parser())
    names = {f"{command} {action.option_strings[-1]}" for command, action in options}
    assert {"safeshare up --app-port", "safeshare provision --gateway-port", "safeshare kiosk --vnc-port",
            "safeshare app --port"} <= names, names
    unchecked = [f"{command} {action.option_strings[-1]}" for command, action in options
                 if action.type is not port_number]
    assert not unchecked, f"port options taking any value: {unchecked}"


@pytest.mark.parametrize("argv, option", [
    (["up", "--app-port", "65536"], "--app-port"),
    (["up", "--app-port", "-1"], "--app-port"),
    (["provision", "policy.yaml", "--gateway-port", "99999"], "--gateway-port"),
    (["kiosk", "--url", "http://127.0.0.1:8050/", "--vnc-port", "70000"], "--vnc-port"),
    (["kiosk", "--url", "http://127.0.0.1:8050/", "--vnc-port", "x"], "--vnc-port"),
])
def test_a_port_outside_0_to_65535_is_exit_2_naming_the_option(tmp_path: Path, argv: list[str],
                                                                 option: str) -> None:
    env = {**os.environ, "SAFESHARE_HOME": str(tmp_path / "home"), "SAFESHARE_SITE": str(tmp_path / "site")}
    result = subprocess.run([sys.executable, "-m", "safeshare.cli", *argv], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, env=env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and option in result.stderr and "0 to 65535" in result.stderr, \
        result.stderr
    assert not (tmp_path / "home").exists() and not (tmp_path / "site").exists()  # nothing started or made
