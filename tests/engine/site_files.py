"""Files the engine's gate tests write again and again: a tiny policy over 40 values of one attribute, its data and
hierarchy, and a site folder with (or without) a `gate.yaml`. One copy, so the tests agree on what "tiny" is."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


def tiny_policy(k: int = 1, suppression_limit: float = 0, gate: str | None = None) -> str:
    """The tiny dataset's policy text, indented by four spaces (callers append lines of the same indent or replace
    parts of it; `write_tiny` dedents): A quasi-identifying over `h.csv`, B insensitive, k-anonymity with `k`."""
    text = ("    dataset: tiny\n"
            "    input: {path: data.csv}\n"
            "    attributes:\n"
            "      A: {type: quasi_identifying, hierarchy: {file: h.csv}}\n"
            "      B: {type: insensitive}\n"
            "    privacy:\n"
            f"      - {{model: k_anonymity, k: {k}}}\n"
            f"    suppression_limit: {suppression_limit}\n")
    return text + (f"    gate: {gate}\n" if gate is not None else "")


TINY = tiny_policy()


def tiny_data(unique: bool = True) -> str:
    """280 records, each of 40 values of A seven times, B cycling over seven values; with `unique`, six of a39's
    records become a38's (a38: 13 records, a39: one, the sample unique)."""
    data = "A;B\n" + "".join(f"a{i % 40};b{i % 7}\n" for i in range(280))
    return data.replace("a39;", "a38;", 6) if unique else data


def write_tiny(folder: Path, body: str = TINY, unique: bool = True) -> Path:
    """`data.csv` (tiny_data), `h.csv` (every a<i> to '*') and `policy.yaml` (`body` dedented) in `folder`; returns
    the policy's path."""
    (folder / "data.csv").write_text(tiny_data(unique))
    (folder / "h.csv").write_text("".join(f"a{i};*\n" for i in range(40)))
    policy = folder / "policy.yaml"
    policy.write_text(textwrap.dedent(body))
    return policy


def site_with(root: Path, name: str, gate_yaml: str | None) -> Path:
    """A site folder `root/name`, with `gate.yaml` holding `gate_yaml` (None: no file, the built-in floor)."""
    site = root / name
    site.mkdir()
    if gate_yaml is not None:
        (site / "gate.yaml").write_text(gate_yaml)
    return site


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """An empty site folder (built-in floor) named by $SAFESHARE_SITE, so the machine's own site never leaks in."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.setenv("SAFESHARE_SITE", str(folder))
    return folder
