"""Load one sealed release bundle into the app's database, then open that database read-only.

Security invariant 1 of DESIGN.md: the app touches data only after `engine.bundle.verify_bundle` has checked the seal,
the manifest, every file's hash and the gate verdict. The verified parquet file is imported into a SQL table (bulk
inserts in chunks), together with a one-row-per-key metadata table holding the bundle's data_sha256, so that a later
start with the same database skips the import and a start with another bundle replaces it. After the import the
database is reopened read-only: SQLite through a `mode=ro` URI on a file that is also chmod 0444, PostgreSQL through
`default_transaction_read_only`. Nothing the app does at run time can change the release data.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import pyarrow.parquet as pq
import sqlalchemy as sa

from engine.bundle import BundleError, verify_bundle

DATA_TABLE = "release_data"
META_TABLE = "release_meta"
ROW_ID = "row_id"
SQLITE_NAME = "release.sqlite"
IMPORT_CHUNK = 50_000


class ReleaseError(RuntimeError):
    """The release cannot be served: a refused bundle or an unusable database (exit 2 at the command line)."""


@dataclass
class LoadedRelease:
    """What the app knows about its one release once it is imported."""

    folder: Path
    manifest: dict
    engine: sa.Engine  # read-only
    db_url: str  # for display, without a password
    imported: bool  # False when the database already held this bundle
    import_seconds: float
    columns: list[str] = field(default_factory=list)

    @property
    def release_id(self) -> str:
        return str(self.manifest["data_sha256"])[:16]


def verify(folder: str | Path) -> dict:
    """verify_bundle with a message that always names the folder (the CLI prints it and exits 2)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReleaseError(f"{folder}: refused: not a folder")
    try:
        return verify_bundle(folder)
    except BundleError as exc:
        message = str(exc)
        if str(folder) not in message:
            message = f"{folder}: {message}"
        raise ReleaseError(f"refused bundle {folder}: {message}") from None


def sqlite_url(path: Path, read_only: bool) -> str:
    """A SQLite URL for `path`; read-only via the URI filename `file:...?mode=ro` (SQLite itself refuses writes)."""
    if not read_only:
        return f"sqlite:///{path}"
    return f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true"


def _read_only_engine(url: str, sqlite_path: Path | None) -> sa.Engine:
    if sqlite_path is not None:
        return sa.create_engine(sqlite_url(sqlite_path, read_only=True))
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "postgresql":
        # Every transaction of every pooled connection starts read-only; a write raises ReadOnlySqlTransaction.
        return sa.create_engine(url, connect_args={"options": "-c default_transaction_read_only=on"},
                                pool_pre_ping=True)
    raise ReleaseError(f"{parsed.render_as_string(hide_password=True)}: unsupported database "
                       "(use SQLite or postgresql+psycopg://)")


def _stored_sha(engine: sa.Engine) -> tuple[str | None, int | None]:
    """The data_sha256 and row count the database holds, or (None, None) when it holds no complete import."""
    inspector = sa.inspect(engine)
    if not inspector.has_table(META_TABLE) or not inspector.has_table(DATA_TABLE):
        return None, None
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.text(f"SELECT key, value FROM {META_TABLE}")).all())
        count = conn.execute(sa.text(f"SELECT COUNT(*) FROM {DATA_TABLE}")).scalar_one()
    return rows.get("data_sha256"), int(count)


def _import(engine: sa.Engine, frame: pd.DataFrame, manifest: dict) -> None:
    """Replace both tables in one transaction: bulk executemany in chunks, then the metadata row last."""
    frame = frame.reset_index(drop=True)
    frame.index.name = ROW_ID
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {META_TABLE}"))
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {DATA_TABLE}"))
        dtype = {name: sa.Text() for name in frame.columns}
        frame.to_sql(DATA_TABLE, conn, index=True, index_label=ROW_ID, chunksize=IMPORT_CHUNK, dtype=dtype,
                     method=None)
        meta = sa.Table(META_TABLE, sa.MetaData(), sa.Column("key", sa.String(64), primary_key=True),
                        sa.Column("value", sa.Text, nullable=False))
        meta.create(conn)
        conn.execute(meta.insert(), [
            {"key": "data_sha256", "value": manifest["data_sha256"]},
            {"key": "dataset", "value": str(manifest.get("dataset", ""))},
            {"key": "manifest", "value": json.dumps(manifest, sort_keys=True)},
            {"key": "imported_at", "value": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        ])


def _read_parquet(folder: Path) -> pd.DataFrame:
    frame = pd.read_parquet(folder / "data.parquet", engine="pyarrow")
    # All released values are labels; the table is text in the database whatever parquet's types were.
    return frame.astype(str)


def load_release(folder: str | Path, db_url: str | None = None, state_dir: str | Path = ".") -> LoadedRelease:
    """Verify the bundle, import it unless the database already holds it, and return a read-only engine."""
    folder = Path(folder)
    manifest = verify(folder)
    started = time.perf_counter()
    rows_expected = pq.ParquetFile(folder / "data.parquet").metadata.num_rows
    state = Path(state_dir)
    sqlite_path: Path | None = None
    try:
        if db_url is None:
            state.mkdir(parents=True, exist_ok=True)
            sqlite_path = state / SQLITE_NAME
            url_for_display = str(sqlite_path)
            imported = False
            if sqlite_path.exists():
                ro = sa.create_engine(sqlite_url(sqlite_path, read_only=True))
                try:
                    held = _stored_sha(ro)
                except sa.exc.DBAPIError:
                    held = (None, None)
                finally:
                    ro.dispose()
                if held != (manifest["data_sha256"], rows_expected):
                    imported = True
            else:
                imported = True
            if imported:
                # Build a new file beside the old one and rename it into place: the database is whole or absent.
                staging = state / f".{SQLITE_NAME}.{os.getpid()}.tmp"
                staging.unlink(missing_ok=True)
                writer = sa.create_engine(sqlite_url(staging, read_only=False))
                try:
                    _import(writer, _read_parquet(folder), manifest)
                finally:
                    writer.dispose()
                os.chmod(staging, 0o444)
                os.replace(staging, sqlite_path)
            url = sqlite_url(sqlite_path, read_only=True)
        else:
            url = db_url
            parsed = sa.make_url(db_url)
            url_for_display = parsed.render_as_string(hide_password=True)
            if parsed.get_backend_name() == "sqlite":
                raise ReleaseError(f"{url_for_display}: give SQLite through --state, not --db")
            writer = sa.create_engine(db_url)
            try:
                imported = _stored_sha(writer) != (manifest["data_sha256"], rows_expected)
                if imported:
                    _import(writer, _read_parquet(folder), manifest)
            finally:
                writer.dispose()
        engine = _read_only_engine(url, sqlite_path)
        with engine.connect() as conn:  # fail now, not on the first request
            conn.execute(sa.text("SELECT 1"))
    except (sa.exc.SQLAlchemyError, OSError, ImportError) as exc:
        raise ReleaseError(f"database {db_url and sa.make_url(db_url).render_as_string(hide_password=True) or state}:"
                           f" {type(exc).__name__}: {exc}".splitlines()[0]) from None
    columns = [str(c) for c in pq.ParquetFile(folder / "data.parquet").schema_arrow.names]
    return LoadedRelease(folder=folder, manifest=manifest, engine=engine, db_url=url_for_display,
                         imported=imported, import_seconds=time.perf_counter() - started, columns=columns)


def read_columns(release: LoadedRelease) -> dict[str, list[str]]:
    """Read the released table from the database (the store of record), in row order, one list per column."""
    table = sa.Table(DATA_TABLE, sa.MetaData(), autoload_with=release.engine)
    names = [name for name in release.columns if name in table.c]
    missing = set(release.columns) - set(names)
    if missing:
        raise ReleaseError(f"{release.db_url}: table {DATA_TABLE} lacks columns {sorted(missing)}")
    query = sa.select(*[table.c[name] for name in names]).order_by(table.c[ROW_ID])
    with release.engine.connect() as conn:
        rows = conn.execute(query).all()
    if not rows:
        return {name: [] for name in names}
    return {name: list(values) for name, values in zip(names, zip(*rows))}
