"""Everything one running app holds: its release, the in-memory table, the workspace, and how pages name filters.

Built once by `create_app` before the server listens, so a refused bundle stops the app at start-up and every request
finds the table ready. Page URLs carry a cohort as repeated `where=ATTRIBUTE=VALUE` query parameters (the natural
encoding of HTML checkboxes, so pages work without JavaScript and a saved analysis is just its query string).
"""
from __future__ import annotations

import ctypes
import gc
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.manifest import Manifest

from .analyses import CohortSpec, clean_filters
from .release import LoadedRelease, load_release, read_coded_columns
from .table import CodedTable, SUPPRESSED
from .workspace import WORKSPACE_NAME, Workspace

if TYPE_CHECKING:
    from outputs.rules import RuleSet

    from .output_store import OutputStore

# Query parameters each kind of page understands; a saved analysis keeps only these.
PAGE_PARAMS: dict[str, frozenset[str]] = {
    "cohort": frozenset({"where", "xs"}),
    "frequencies": frozenset({"attr", "where", "xs"}),
    "crosstab": frozenset({"row", "col", "where", "xs", "pct"}),
    "compare": frozenset({"attr", "a", "b", "xa", "xb"}),
    "descriptive": frozenset({"attr", "by", "where", "xs"}),
    "histogram": frozenset({"attr", "bins", "where", "xs"}),
    "regression": frozenset({"model", "y", "event", "x", "ref", "cat", "conf", "where", "xs"}),
}


def slug(name: str) -> str:
    """An attribute name usable inside an HTML id (ids like f-<attribute>-<index> that tests and scripts find)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_"


@dataclass
class AppContext:
    release: LoadedRelease
    table: CodedTable
    workspace: Workspace
    seal: dict
    startup_seconds: float
    slugs: dict[str, str] = field(default_factory=dict)
    outputs: "OutputStore | None" = None
    output_rules: "RuleSet | None" = None
    recipient: str = "researcher"

    @property
    def manifest(self) -> Manifest:
        return self.release.manifest

    @property
    def dataset(self) -> str:
        return self.manifest.dataset

    def quasi_identifiers(self) -> list[str]:
        return [name for name in self.manifest.transformation if name in self.table.columns]

    def parse_where(self, values: Iterable[str]) -> dict[str, list[str]]:
        """`ATTRIBUTE=VALUE` strings into a validated filter (FilterError on an unknown attribute or value)."""
        raw: dict[str, list[str]] = {}
        for item in values:
            name, sep, value = item.partition("=")
            if not sep:
                continue
            raw.setdefault(name, []).append(value)
        return clean_filters(self.table, raw)

    def cohort_from(self, params: list[tuple[str, str]], key: str = "where", exclude_key: str = "xs") -> CohortSpec:
        filters = self.parse_where(value for name, value in params if name == key)
        exclude = any(name == exclude_key and value in ("1", "on", "true") for name, value in params)
        return CohortSpec(filters, exclude)

    def attributes(self, counts: dict[str, list[int]] | None = None) -> list[dict]:
        """Attributes with their labels (and counts), for pages."""
        out = []
        for name in self.table.names:
            column = self.table.column(name)
            numbers = counts.get(name) if counts else None
            values = [{"index": i, "label": label, "suppressed": label == SUPPRESSED,
                       "count": int(numbers[i]) if numbers is not None else None}
                      for i, label in enumerate(column.labels)]
            out.append({"name": name, "slug": self.slugs[name], "values": values,
                        "level": self.manifest.transformation.get(name)})
        return out


def release_freed_memory() -> None:
    """Hand the memory freed after import and encoding back to the system (glibc keeps it otherwise), so the app's
    resident size is what it holds: the codes, not the strings it read once."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def output_rules(site: str | Path | None, manifest: Manifest) -> "RuleSet":
    """The output rules in force in the app: SITE/outputs.yaml when the app is given the site folder (`--site`, or a
    folder holding outputs.yaml mounted read-only), else ACRO's defaults; then tightened (never relaxed) by the
    `outputs:` block of the release's manifest when its engine wrote one. A relaxing or malformed block refuses the
    release (ReleaseError): outputs must not be checked under rules weaker than the custodian's."""
    from engine.errors import InputError
    from outputs.floor import load_floor, tighten

    from .release import ReleaseError

    try:
        floor = load_floor(site) if site is not None else load_floor(None)
        block = manifest.document().get("outputs")
        return tighten(floor, block, f"manifest of release {manifest.dataset}") if block else floor
    except InputError as exc:
        raise ReleaseError(f"the output rules cannot be read: {exc}") from None


def build_context(bundle_dir: str | Path, db_url: str | None, state_dir: str | Path,
                  trust: str | Path | None = None, release_ref: str | None = None,
                  site: str | Path | None = None, recipient: str | None = None) -> AppContext:
    """Verify (signature against the trust store `trust`, default the site's; the seal as release `release_ref`,
    default where the folder lies) and import the bundle, read it once into codes, open the workspace (raises
    ReleaseError)."""
    started = time.perf_counter()
    release = load_release(bundle_dir, db_url=db_url, state_dir=state_dir, trust=trust, release=release_ref)
    qis = list(release.manifest.transformation)
    table = CodedTable(read_coded_columns(release), quasi_identifiers=qis)
    seal = release.seal  # the seal as verified, not re-read from a folder that may have changed since
    workspace = Workspace(Path(state_dir) / WORKSPACE_NAME)
    release_freed_memory()
    slugs: dict[str, str] = {}
    for name in table.names:
        candidate = slug(name)
        while candidate in slugs.values():
            candidate += "_"
        slugs[name] = candidate
    from .output_store import OutputStore

    rules = output_rules(site, release.manifest)
    return AppContext(release, table, workspace, seal, time.perf_counter() - started, slugs,
                      OutputStore(state_dir), rules, recipient or "researcher")
