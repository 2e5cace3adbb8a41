"""Per-record risk in a release's report.html: which released records carry the risk (their released values and rows
of the data file) and a histogram, with the figures recomputed here from the released data."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.risk.individual import key_risk
from safeshare.cli import main
from tests.engine.site_files import site_with, tiny_policy, write_tiny

TINY = tiny_policy(gate="{populations: [1000], max_pu_su_ratio: 10}")


class Elements(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def find(self, tag: str, **attrs: str) -> list[dict]:
        return [a for t, a in self.found if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


@pytest.fixture
def site(tmp_path) -> Path:
    return site_with(tmp_path, "site", "max_pu_su_ratio: 10\nrequired_populations: [1000]\n")


def tiny(tmp_path: Path) -> Path:
    """280 records over 40 values of A, seven each, except a38 (13) and a39 (one record, the last)."""
    return write_tiny(tmp_path, TINY)


def test_report_lists_the_riskiest_released_records_and_a_histogram(tmp_path, site, capsys):
    out = tmp_path / "out"
    assert main(["deid", str(tiny(tmp_path)), "--out", str(out), "--quiet", "--site", str(site)]) == 0, \
        capsys.readouterr().err
    html = (out / "report.html").read_text()
    page = Elements(html)
    released = pd.read_parquet(out / "data.parquet")
    sizes = released.groupby("A").size()
    assert 'id="record-risk"' in html
    # the only sample unique is a39 (the last row of the released file); it is ranked first
    first = page.find("tr", **{"class": "risky-record", "data_rank": "1"})
    assert first, "no riskiest record listed"
    row39 = re.search(r'<tr class="risky-record" data-rank="1"[^>]*>(.*?)</tr>', html).group(1)
    unique_row = int(np.flatnonzero(released["A"].to_numpy() == "a39")[0])
    assert unique_row == 279 and "<td>a39</td>" in row39 and f"<td>{unique_row}</td>" in row39
    risk = key_risk(sizes.to_numpy(), 1000.0)
    assert float(first[0]["data-risk"]) > 0 and float(first[0]["data-risk"]) <= 1
    # the measures per population are the sums over the released records
    row = page.find("tr", **{"class": "record-risk", "data_population": "1000.0"})[0]
    assert float(row["data-expected"]) == pytest.approx(float(np.dot(sizes.to_numpy(), risk)), rel=1e-12)
    assert float(row["data-max"]) == pytest.approx(float(risk.max()), rel=1e-12)
    # histogram: one bar per risk interval, the bars' records add up to the released records
    bars = re.search(r'<svg class="chart" id="record-risk-histogram".*?</svg>', html, re.S).group(0)
    values = [float(v) for v in re.findall(r'class="bar"[^>]*data-value="([^"]+)"', bars)]
    assert sum(values) == 280
    assert 'data-population="1000.0"' in bars


def test_report_excludes_suppressed_records(tmp_path, site, capsys):
    """With k = 2 the unique a39 is suppressed: it is neither counted nor listed."""
    policy = tiny(tmp_path)
    policy.write_text(policy.read_text().replace("k: 1", "k: 2").replace("suppression_limit: 0",
                                                                         "suppression_limit: 0.05"))
    out = tmp_path / "out"
    assert main(["deid", str(policy), "--out", str(out), "--quiet", "--site", str(site)]) == 0, \
        capsys.readouterr().err
    html = (out / "report.html").read_text()
    bars = re.search(r'<svg class="chart" id="record-risk-histogram".*?</svg>', html, re.S).group(0)
    assert sum(float(v) for v in re.findall(r'class="bar"[^>]*data-value="([^"]+)"', bars)) == 279
    assert "<td>a39</td>" not in re.search(r'id="record-risk".*?</section>', html, re.S).group(0)


def test_partitioned_dataset_report_shows_the_measures_from_class_sizes(tmp_path, site, capsys):
    out = tmp_path / "dataset"
    assert main(["deid", str(tiny(tmp_path)), "--out", str(out), "--partitions", "2", "--scheduler", "none",
                 "--dataset", "--quiet", "--site", str(site)]) == 0, capsys.readouterr().err
    html = (out / "report.html").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert 'id="record-risk"' in html and "risky-record" not in html   # the records stayed on the workers
    row = Elements(html).find("tr", **{"class": "record-risk", "data_population": "1000.0"})[0]
    assert float(row["data-expected"]) > 0
    assert manifest["risk"]["released_records"] == 280
