"""The analytics web app of the enclave: one sealed release, researchers' counts and tests, nothing that leaves.

`create_app(bundle_dir)` (`application`) verifies the bundle (refusing anything else with `ReleaseError`), imports it into the
release database, reads it once into memory, and returns a FastAPI app whose every response carries a strict
Content-Security-Policy. Modules, one job each:

- `release`: bundle verification, bulk import into SQLAlchemy (SQLite or PostgreSQL), read-only reopening
- `table`: the release as integer codes per column; masks, bincount frequencies and cross-tabulations
- `analyses`: cohort counts, frequency tables, cross-tabulations, cohort comparison with a chi-square test
- `descriptive`: statistics of numeric attributes by group, histograms and bar charts of any column
- `regression`: OLS, logit and probit (statsmodels) on a design matrix built from the codes; `blas`: one BLAS thread
- charts: inline SVG from `engine.svgcharts` (one chart module for the app and the release report); `charts` adds
  the regression page's coefficient plot in the same style
- `workspace`: saved analyses (parameters only, bounded in count and size) in their own writable SQLite file
- outputs: `output_checks` (an analysis as a checked table: per-cell SDC checks from the `outputs` library,
  differencing against earlier outputs, remedies), `output_store` (STATE/outputs/<id>/: data.csv, meta.json,
  rendering.html, written atomically, bounded), `output_routes` (`/api/outputs` and the outputs pages)
- release requests (the researcher's side of the airlock): `airlock_drafts` (drafts under STATE/airlock/requests,
  their rules, the atomic outbox entry on submission, the host's status read for display), `airlock_routes`
  (`/api/requests` and the /requests pages)
- `security`: headers, allowed methods, same-origin POSTs, request bodies bounded as they stream
- `api`, `pages`: JSON endpoints and HTML pages; `cli`: `safeshare app`
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STATE = Path(os.environ.get("SAFESHARE_APP_STATE", "~/.local/state/safeshare/app")).expanduser()


def __getattr__(name: str):
    # FastAPI and SQLAlchemy load only when the app is built, not when `safeshare` registers its subcommands.
    if name == "create_app":
        from .application import create_app

        return create_app
    if name == "ReleaseError":
        from .release import ReleaseError

        return ReleaseError
    raise AttributeError(name)


__all__ = ["DEFAULT_STATE", "ReleaseError", "create_app"]
