"""Issue 12, items 7-10: bad input is one line naming file, field and problem with exit 2 (never a traceback), strict
policy types, meaningful builder specs, no echo of unreadable inputs, and a release folder replaced as a whole."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from safeshare.cli import main

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
    dataset: tiny
    input: {path: data.csv}
    attributes:
      A: {type: quasi_identifying, hierarchy: {file: h.csv}}
      B: {type: insensitive}
      N: {type: insensitive}
    privacy:
      - {model: k_anonymity, k: 2}
    suppression_limit: 1
"""
DATA = "A;B;N\na1;x;5\na2;y;7\na1;x;20\na2;y;31\n"


@pytest.fixture(autouse=True)
def no_site(tmp_path, monkeypatch):
    """Every run here uses the built-in site gate floor, whatever the machine has."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("SAFESHARE_SITE", str(site))


def write_policy(tmp_path: Path, body: str = GOOD, data: str = DATA) -> Path:
    (tmp_path / "h.csv").write_text("a1;*\na2;*\n")
    (tmp_path / "data.csv").write_text(data)
    policy = tmp_path / "policy.yaml"
    policy.write_text(textwrap.dedent(body))
    return policy


def numeric(spec: str) -> str:
    """GOOD with N as a quasi-identifier under the given hierarchy."""
    return GOOD.replace("N: {type: insensitive}", f"N: {{type: quasi_identifying, hierarchy: {spec}}}")


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "\n" not in err, err
    return err


BAD_POLICIES = [
    # item 7
    ("encoding", GOOD.replace("{path: data.csv}", "{path: data.csv, encoding: bogus-enc}"),
     "input.encoding", "unknown encoding 'bogus-enc'"),
    ("regex separator", GOOD.replace("{path: data.csv}", "{path: data.csv, separator: '.*'}"),
     "input.separator", "at most 1 character"),
    ("empty hierarchy separator", GOOD.replace("{file: h.csv}", "{file: h.csv, separator: ''}"),
     "attributes.A.hierarchy.separator", "at least 1 character"),
    ("long hierarchy separator", GOOD.replace("{file: h.csv}", "{file: h.csv, separator: ';;'}"),
     "attributes.A.hierarchy.separator", "at most 1 character"),
    ("population .inf", GOOD.replace("k: 2}", "k: 2}\n      - {model: population_uniqueness, threshold: 0.5, "
                                              "population: .inf}"), "privacy[1].population", "finite"),
    ("population as text .inf", GOOD.replace("k: 2}", "k: 2}\n      - {model: population_uniqueness, threshold: 0.5, "
                                                      "population: inf}"), "privacy[1].population", "finite"),
    ("population below the sample", GOOD.replace("k: 2}", "k: 2}\n      - {model: population_uniqueness, "
                                                          "threshold: 0.5, population: 2}"),
     "privacy[1].population", "smaller than the 4 records"),
    ("gate population .inf", GOOD + "    gate: {populations: [.inf]}\n", "gate.populations[0]", "finite"),
    ("gate population 2", GOOD + "    gate: {populations: [2]}\n", "gate.populations[0]", "smaller than the 4 records"),
    ("width 1e309", numeric("{builder: intervals, widths: [1e309]}"), "attributes.N.hierarchy.widths[0]", "finite"),
    ("width 1e308 after 5", numeric("{builder: intervals, widths: [5, 1e308]}"),
     "attributes.N.hierarchy.widths[1]", "more than 1e+09 times"),
    ("date format %", numeric("{builder: dates, format: '%'}"), "attributes.N.hierarchy.format", "year directive"),
    ("date format stray %", numeric("{builder: dates, format: '%Y%'}"), "attributes.N.hierarchy.format",
     "stray %"),
    # item 9
    ("width 1e-300", numeric("{builder: intervals, widths: [1e-300]}"), "attributes.N.hierarchy.widths[0]",
     "intervals between start 0 and the value 31"),
    ("start .nan", numeric("{builder: intervals, widths: [5], start: .nan}"), "attributes.N.hierarchy.start",
     "finite"),
    ("k as text", GOOD.replace("k: 2", "k: '5'"), "privacy[0].k", "got str '5'"),
    ("k as boolean", GOOD.replace("k: 2", "k: true"), "privacy[0].k", "got a boolean"),
    ("suppression limit as text", GOOD.replace("suppression_limit: 1", "suppression_limit: '1'"),
     "suppression_limit", "numbers are never converted"),
    ("gs_factor as boolean", GOOD + "    quality: {gs_factor: false}\n", "quality.gs_factor", "boolean"),
    ("time limit as text", GOOD + "    search: {time_limit_seconds: '10'}\n", "search.time_limit_seconds", "got str"),
    ("min_level as text", GOOD.replace("{file: h.csv}}", "{file: h.csv}, min_level: '0'}"),
     "attributes.A.min_level", "got str"),
    ("group size as float", numeric("{builder: ordered, order: ['5', '7', '20', '31'], group_sizes: [2.0]}"),
     "attributes.N.hierarchy.group_sizes[0]", "valid integer"),
]


@pytest.mark.parametrize("name, body, field, words", BAD_POLICIES, ids=[c[0] for c in BAD_POLICIES])
def test_bad_policy_is_one_line_exit_2(tmp_path, capsys, name, body, field, words):
    policy = write_policy(tmp_path, body)
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = one_line_error(capsys)
    assert f"{policy}: {field}: " in err and words in err, err
    assert not (tmp_path / "out").exists()


def test_yaml_exponents_are_numbers(tmp_path, capsys):
    """YAML 1.1 reads `1e-3` as text; policies read it as the number it is, so strict types do not refuse it."""
    policy = write_policy(tmp_path, numeric("{builder: intervals, widths: [1e1, 2e1]}")
                          .replace("suppression_limit: 1", "suppression_limit: 1e0"))
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["transformation"]["N"] >= 0


@pytest.mark.parametrize("population, words", [(".inf", "finite"), ("3", "smaller than the 4 records")])
def test_risk_refuses_bad_populations(tmp_path, capsys, population, words):
    policy = write_policy(tmp_path, GOOD.replace("k: 2}", "k: 2}\n      - {model: population_uniqueness, "
                                                          f"threshold: 0.5, population: {population}}}"))
    assert main(["risk", str(policy)]) == 2
    err = one_line_error(capsys)
    assert "privacy[1].population" in err and words in err


@pytest.mark.parametrize("out, words", [
    ("FILE", "exists and is not a folder"),
    ("/dev/null", "/dev/null exists and is not a folder"),
    ("/proc/safeshare-out", "cannot write in /proc"),
    ("/proc/self/safeshare-out", "cannot write in /proc/self"),
    ("", "empty"),
    ("FOREIGN", "does not hold a previous output (notes.txt)"),
])
def test_unusable_out_is_refused_before_the_search(tmp_path, capsys, monkeypatch, out, words):
    policy = write_policy(tmp_path)
    (tmp_path / "FILE").write_text("keep me\n")
    (tmp_path / "FOREIGN").mkdir()
    (tmp_path / "FOREIGN" / "notes.txt").write_text("keep me too\n")
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["deid", str(policy), "--out", out, "--quiet"]) == 2
    err = one_line_error(capsys)
    assert "--out" in err and words in err, err
    # Nothing written: `--out ""` used to write the release into the current folder.
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "FILE").read_text() == "keep me\n"
    assert (tmp_path / "FOREIGN" / "notes.txt").read_text() == "keep me too\n"


@pytest.mark.parametrize("out, words", [(".", "is a folder"), ("", "empty")])
def test_hierarchy_out_must_be_a_file(tmp_path, capsys, monkeypatch, out, words):
    policy = write_policy(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["hierarchy", str(policy), "A", "--out", out]) == 2
    err = one_line_error(capsys)
    assert "--out" in err and words in err


def test_release_to_a_file_is_refused(tmp_path, capsys):
    policy = write_policy(tmp_path)
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    capsys.readouterr()
    (tmp_path / "releases").write_text("a file\n")
    assert main(["release", str(tmp_path / "out"), "--to", str(tmp_path / "releases")]) in (1, 2)
    err = one_line_error(capsys)
    assert "not a folder" in err
    assert (tmp_path / "releases").read_text() == "a file\n"


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_while_importing_is_a_clean_interruption():
    """Ctrl+C while the components' modules are imported (slow on a cold start) exits 130 with one line."""
    script = textwrap.dedent("""
        import importlib.abc, os, signal, sys

        class InterruptOnImport(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "engine.cli":
                    os.kill(os.getpid(), signal.SIGINT)   # a real SIGINT, delivered inside the import
                return None

        sys.meta_path.insert(0, InterruptOnImport())
        from safeshare.cli import main
        sys.exit(main(["deid", "--help"]))
    """)
    # As a terminal starts a foreground command: SIGINT at its default disposition. A suite started in the background
    # of a non-interactive shell (`pytest ... &`) has SIGINT ignored, children inherit that, and a Python started so
    # installs no KeyboardInterrupt handler at all: the SIGINT was then ignored and the CLI exited 0 (issue 24, 13).
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=_sigint_default)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip() == "safeshare: interrupted"


# --- item 10: never echo the content of a file that is not the declared table --------------------------------------
SECRET = "$6$rounds=5000$Xq0tS3cr3tHash"


@pytest.mark.parametrize("content, encoding", [
    (f"root:{SECRET}:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n".encode(), "utf-8"),   # like /etc/shadow
    (b"\x7fELF\x02\x01\x01\x00" + SECRET.encode() + b"\x00\xff\xfe\x90" * 8, "utf-8"),         # a binary
    (b"\x7fELF\x02\x01\x01;" + SECRET.encode() + b";\xff\xfe\x90\n\x00\x01;\x02\n", "latin-1"),   # decodes
    (f"{SECRET};A\nroot;a1\n".encode(), "utf-8"),                                               # one column matches
])
def test_unreadable_input_content_is_not_echoed(tmp_path, capsys, content, encoding):
    secret_file = tmp_path / "shadow"
    secret_file.write_bytes(content)
    body = GOOD.replace("{path: data.csv}", f"{{path: {secret_file}, encoding: {encoding}}}")
    policy = write_policy(tmp_path, body)
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = one_line_error(capsys)
    assert "Xq0tS3cr3tHash" not in err and "daemon" not in err and "ELF" not in err, err


def test_etc_shadow_is_not_echoed(tmp_path, capsys):
    shadow = Path("/etc/shadow")
    if not os.access(shadow, os.R_OK):
        pytest.skip("/etc/shadow is not readable here")
    first_line = shadow.read_text(errors="replace").splitlines()[0]
    policy = write_policy(tmp_path, GOOD.replace("{path: data.csv}", "{path: /etc/shadow}"))
    assert main(["deid", str(policy), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = one_line_error(capsys)
    assert first_line not in err and first_line.split(":")[0] + ":" not in err, err


# --- item 8: the release folder is replaced as a whole -------------------------------------------------------------
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_rerun_replaces_the_whole_folder(tmp_path, capsys):
    policy = write_policy(tmp_path)
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0
    first = json.loads((out / "manifest.json").read_text())
    (tmp_path / "data.csv").write_text(DATA.replace(";x;", ";z;"))
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0
    second = json.loads((out / "manifest.json").read_text())
    assert second["data_sha256"] != first["data_sha256"]
    import hashlib

    for name, digest in second["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no staging left


def test_interrupted_rerun_leaves_the_old_output_untouched(tmp_path, capsys, monkeypatch):
    """Ctrl+C while the new release is being written (here: while the report renders, after the data is written)
    must leave the previous output exactly as it was, and no temporary folder behind."""
    policy = write_policy(tmp_path)
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 0
    old = _snapshot(out)
    (tmp_path / "data.csv").write_text(DATA.replace(";x;", ";z;"))   # a run that writes different data

    import engine.report

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(engine.report, "render_report", interrupted)
    assert main(["deid", str(policy), "--out", str(out), "--quiet"]) == 130
    assert _snapshot(out) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data.csv", "h.csv", "out", "policy.yaml", "site"])
