"""Issue 25, item 1: the demo table is in the repository, the benchmark tables are not.

The demo (ADULT, 30,162 records, with its hierarchies) lies in data/demo/adult/ and every ADULT example policy reads
it from there, relative to the policy file; the other example policies read the benchmark tables from
$SAFESHARE_BENCHMARK_DATA (default ../shared/data next to the repository) and say so, by name, when they are missing.
The end-to-end proof (a clone with no ../shared next to it) is tests/e2e/test_fresh_clone.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import InputError
from engine.pathvars import expand
from engine.policy import load_policy
from engine.table import input_file
from tests.datasets import (BENCHMARK_DATA_ENV, DEMO_DATA, EXAMPLES, REPO, example_tables, missing_benchmark,
                            require_benchmark)

BENCHMARK_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.yaml") if example_tables(p.name))
DEMO_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.yaml")
                       if p.name.startswith("adult") and not example_tables(p.name))


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "safeshare.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_the_demo_files_are_in_the_repository_unchanged():
    """Every file SHA256SUMS lists is there with its recorded hash (a line-ending conversion or a truncated copy
    would change the released data and every test figure taken on ADULT)."""
    folder = DEMO_DATA / "adult"
    listed = {}
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.lstrip("*")] = digest
    assert set(listed) == {p.name for p in folder.glob("*.csv")}
    assert "adult.csv" in listed and len(listed) == 10  # the table and its nine hierarchies
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    rows = (folder / "adult.csv").read_text().splitlines()
    assert len(rows) == 1 + 30_162
    licence = (DEMO_DATA / "README.md").read_text()
    assert "CC BY 4.0" in licence and "10.24432/C5XW20" in licence


def test_every_adult_example_reads_the_demo_copy():
    """The README's policies (and `./dev up`'s default, adult-k5) resolve inside the repository."""
    assert "adult-k5.yaml" in DEMO_EXAMPLES and len(DEMO_EXAMPLES) >= 10
    for name in DEMO_EXAMPLES:
        policy = load_policy(EXAMPLES / name)
        path, _ = input_file(policy)
        assert path.resolve() == (DEMO_DATA / "adult" / "adult.csv").resolve(), name
        for attribute in policy.attributes.values():
            if getattr(attribute.hierarchy, "file", None):
                assert policy.resolve(attribute.hierarchy.file).resolve().parent == (DEMO_DATA / "adult").resolve()


def test_no_example_names_the_benchmark_folder_without_the_variable():
    """A benchmark path written as ../../../shared/data would ignore $SAFESHARE_BENCHMARK_DATA."""
    assert {"cup-k5.yaml", "fars-subset-k5.yaml", "creditcard-k5.yaml", "mach2019-k5.yaml",
            "census-income-kdd-k5.yaml"} <= set(BENCHMARK_EXAMPLES)
    for path in EXAMPLES.glob("*.yaml"):
        text = path.read_text().replace("${SAFESHARE_BENCHMARK_DATA:-../../../shared/data}", "")
        assert "shared/data/" not in "\n".join(line for line in text.splitlines() if not line.startswith("#")), \
            path.name


def test_path_variables(tmp_path, monkeypatch):
    """Set: its value (relative to the working directory when the path starts with it); unset: the default, as
    written (relative to the policy, like any path); unset with no default: bad input naming the variable."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SS_TEST_DATA", raising=False)
    assert expand("${SS_TEST_DATA:-../data}/t.csv", "p.yaml") == "../data/t.csv"
    assert expand("a/$b/${SS_TEST_DATA:-x}", "p.yaml") == "a/$b/x"  # only the braced form is a variable
    with pytest.raises(InputError, match=r"\$\{SS_TEST_DATA\}, which is not set"):
        expand("${SS_TEST_DATA}/t.csv", "p.yaml")
    monkeypatch.setenv("SS_TEST_DATA", "rel")
    assert expand("${SS_TEST_DATA:-../data}/t.csv", "p.yaml") == f"{tmp_path / 'rel'}/t.csv"
    monkeypatch.setenv("SS_TEST_DATA", "/abs/folder")
    assert expand("${SS_TEST_DATA}/t.csv", "p.yaml") == "/abs/folder/t.csv"


def test_a_benchmark_policy_follows_the_variable(tmp_path):
    """cup-k5 reads CUP from the folder the variable names; missing there, `deid` exits 2 naming the file, the
    field and the variable to set."""
    folder = tmp_path / "bench" / "cup"
    folder.mkdir(parents=True)
    policy = load_policy(EXAMPLES / "cup-k5.yaml")
    env = {**os.environ, BENCHMARK_DATA_ENV: str(tmp_path / "bench")}
    result = cli("deid", str(EXAMPLES / "cup-k5.yaml"), "--out", str(tmp_path / "out"), "--quiet", env=env)
    assert result.returncode == 2, result.stderr
    assert f"input file '{folder / 'cup.csv'}' does not exist" in result.stderr
    assert "input.path" in result.stderr and f"set {BENCHMARK_DATA_ENV} to the folder" in result.stderr
    assert not (tmp_path / "out").exists()
    # relative to the working directory, as a shell user means it
    relative = cli("risk", str(EXAMPLES / "cup-k5.yaml"), env={**os.environ, BENCHMARK_DATA_ENV: "bench"},
                   cwd=tmp_path)
    assert relative.returncode == 2 and str(folder / "cup.csv") in relative.stderr
    assert policy.input.path.startswith("${SAFESHARE_BENCHMARK_DATA:-")


def test_the_demo_runs_without_the_benchmark_folder(tmp_path):
    """`./dev demo`'s command with the benchmark folder pointed nowhere: the demo does not need it."""
    (tmp_path / "site").mkdir()  # an empty site: the built-in gate floor, never this machine's site
    env = {**os.environ, BENCHMARK_DATA_ENV: str(tmp_path / "nowhere"), "SAFESHARE_SITE": str(tmp_path / "site")}
    out = tmp_path / "adult-k5"
    result = cli("deid", "policies/examples/adult-k5.yaml", "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == 30_162 and manifest["gate"]["passed"] is True


def test_missing_benchmark_data_skips_here_and_fails_under_ci(tmp_path, monkeypatch):
    monkeypatch.setenv(BENCHMARK_DATA_ENV, str(tmp_path / "nowhere"))
    reason = missing_benchmark("cup")
    assert reason is not None and str(tmp_path / "nowhere") in reason and BENCHMARK_DATA_ENV in reason
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="nowhere"):
        require_benchmark("cup")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run every benchmark test"):
        require_benchmark("cup")
    (tmp_path / "nowhere" / "cup").mkdir(parents=True)
    assert require_benchmark("cup") == tmp_path / "nowhere"
    with pytest.raises(pytest.fail.Exception, match="the benchmark tables fars-subset are not at"):
        require_benchmark("cup", "fars-subset")
