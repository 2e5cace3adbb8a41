"""Load one sealed release bundle into the app's database, then open that database read-only.

Security invariant 1 of DESIGN.md: the app touches data only after `engine.bundle.check_bundle` has checked the seal's
signature against the site's trust store (a key trusted for releases; the store is mounted read-only into the app's
container), the seal, the manifest, every file's hash and the gate verdict. The verified parquet file is imported into a SQL table (bulk
inserts in chunks), together with a one-row-per-key metadata table holding the bundle's data_sha256, so that a later
start with the same database skips the import and a start with another bundle replaces it. After the import the
database is reopened read-only: SQLite through a `mode=ro` URI on a file that is also chmod 0444, PostgreSQL through
`default_transaction_read_only`. Nothing the app does at run time can change the release data.
"""
from __future__ import annotations

import functools
import hashlib
import json
import operator
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import numpy as np
import sqlalchemy as sa

from engine.bundle import BundleError, VerifiedBundle, check_bundle, data_files
from engine.manifest import Manifest
from safeshare.signing import KeyFileError, TrustStore
from safeshare.sitefolder import site_trust

from .table import MISSING, Column, code_dtype, encode_labels, label_key

DATA_TABLE = "release_data"
META_TABLE = "release_meta"
ROW_ID = "row_id"
SQLITE_NAME = "release.sqlite"
IMPORT_CHUNK = 50_000
MAX_CASE_LABELS = 1000  # beyond this, a column is read as text (a CASE that long is slower than strings)


class ReleaseError(RuntimeError):
    """The release cannot be served: a refused bundle or an unusable database (exit 2 at the command line)."""


@dataclass
class LoadedRelease:
    """What the app knows about its one release once it is imported."""

    folder: Path
    manifest: Manifest
    engine: sa.Engine  # read-only
    db_url: str  # for display, without a password
    imported: bool  # False when the database already held this bundle
    import_seconds: float
    columns: list[str] = field(default_factory=list)
    seal: dict = field(default_factory=dict)  # as verified (signature included)
    trust_file: str = ""  # the trust store the signature was checked against

    @property
    def release_id(self) -> str:
        return self.manifest.data_sha256[:16]


def trust_for(folder: str | Path, trust: str | Path | None) -> Path:
    """The trust store to check a bundle against: the one given, else SITE/trust.json of the site ($SAFESHARE_SITE,
    else /var/lib/safeshare), never one near the bundle (a writer of the releases folder could put it there).
    Raises ReleaseError when no trust store is named."""
    try:
        return site_trust(trust)
    except KeyFileError as exc:
        raise ReleaseError(f"refused bundle {folder}: no signature can be checked: {exc}") from None


def verify(folder: str | Path, trust: str | Path | None = None, release: str | None = None) -> VerifiedBundle:
    """check_bundle with a message that always names the folder and the reason (the CLI prints it and exits 2):
    an unsigned or wrongly-signed bundle, one lying under another release's name than its seal's (or than
    `release`, DATASET/ID), or a trust store that cannot be read, is refused like any other."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReleaseError(f"{folder}: refused: not a folder")
    trust_path = trust_for(folder, trust)
    try:
        store = TrustStore.load(trust_path)
    except KeyFileError as exc:
        raise ReleaseError(f"refused bundle {folder}: no signature can be checked: {exc}") from None
    try:
        return check_bundle(folder, store, release)
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


def _placeholders(engine: sa.Engine, count: int) -> str:
    style = engine.dialect.paramstyle
    if style == "qmark":
        return ", ".join("?" * count)
    if style in ("format", "pyformat"):
        return ", ".join(["%s"] * count)
    if style == "numeric":
        return ", ".join(f":{i + 1}" for i in range(count))
    raise ReleaseError(f"unsupported DBAPI parameter style {style!r}")


def _verified_parquets(folder: Path, manifest: Manifest) -> Iterator:  # of pyarrow.parquet.ParquetFile
    """The release's data files (data.parquet, or a partitioned release's parts in order), each parsed from the very
    bytes hashed here against the verified manifest: what is imported is what verified. One part is held at a time.
    pyarrow is imported only here: `safeshare app` imports in a child process, so the serving process never loads it
    (it would add ~80 MB to every running enclave)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in data_files(manifest):
        path = folder / name
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ReleaseError(f"refused bundle {folder}: {path}: {exc.strerror or exc}") from None
        if hashlib.sha256(raw).hexdigest() != manifest.files[name]:
            raise ReleaseError(f"refused bundle {folder}: {path} changed after verification")
        yield pq.ParquetFile(pa.BufferReader(raw))


def _expected_rows(manifest: Manifest, folder: Path) -> int:
    records = manifest.records
    if records < 0:
        raise ReleaseError(f"refused bundle {folder}: the manifest's field 'records' is not a row count")
    return records


def _batches(parquets: Iterator, folder: Path, manifest: Manifest) -> Iterator[tuple[list[str], list[tuple]]]:
    """(column names, rows) of the data files as lists of (row_id, label, ...) tuples, IMPORT_CHUNK at a time: memory
    stays bounded by one chunk (and one part's bytes) instead of the whole table as Python strings. Every value
    becomes text (released values are labels); a null stays NULL. Row ids run on across parts; every part must have
    the first part's columns and all parts together the manifest's number of records."""
    import pyarrow as pa
    import pyarrow.compute as pc

    expected = _expected_rows(manifest, folder)
    start = 0
    names: list[str] | None = None
    for parquet in parquets:
        part_names = [str(name) for name in parquet.schema_arrow.names]
        if names is None:
            names = part_names
        elif part_names != names:
            raise ReleaseError(f"refused bundle {folder}: the data parts' columns differ ({part_names} after {names})")
        if start + parquet.metadata.num_rows > expected:
            break
        for batch in parquet.iter_batches(batch_size=IMPORT_CHUNK):
            columns = [pc.cast(column, pa.string()).to_pylist() for column in batch.columns]
            yield names, list(zip(range(start, start + batch.num_rows), *columns))
            start += batch.num_rows
        if parquet.metadata.num_rows == 0:
            yield names, []
    if start != expected or names is None:
        raise ReleaseError(f"refused bundle {folder}: the data has {start} rows or more, the manifest says "
                           f"{manifest.records}")


def _import(engine: sa.Engine, folder: Path, manifest: Manifest) -> None:
    """Replace both tables in one transaction: the data by DBAPI executemany in chunks of IMPORT_CHUNK rows (a few
    seconds for a million rows, where per-row inserts or pandas' dict-per-row path take several times longer), then
    the metadata row last, so that a database holding a data_sha256 holds all of that data."""
    batches = _batches(_verified_parquets(folder, manifest), folder, manifest)
    names, first = next(batches)
    metadata = sa.MetaData()
    data = sa.Table(DATA_TABLE, metadata, sa.Column(ROW_ID, sa.Integer, primary_key=True, autoincrement=False),
                    *[sa.Column(name, sa.Text) for name in names])
    meta = sa.Table(META_TABLE, metadata, sa.Column("key", sa.String(64), primary_key=True),
                    sa.Column("value", sa.Text, nullable=False))
    preparer = engine.dialect.identifier_preparer
    insert = (f"INSERT INTO {preparer.quote(DATA_TABLE)} ({', '.join(preparer.quote(c.name) for c in data.c)}) "
              f"VALUES ({_placeholders(engine, len(data.c))})")
    with engine.begin() as conn:
        metadata.drop_all(conn, checkfirst=True)
        metadata.create_all(conn)
        if first:
            conn.exec_driver_sql(insert, first)
        for _, chunk in batches:
            if chunk:
                conn.exec_driver_sql(insert, chunk)
        conn.execute(meta.insert(), [
            {"key": "data_sha256", "value": manifest.data_sha256},
            {"key": "dataset", "value": manifest.dataset},
            {"key": "manifest", "value": json.dumps(manifest.document(), sort_keys=True)},
            {"key": "imported_at", "value": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        ])


def _fast_sqlite(dbapi_connection, _record) -> None:
    dbapi_connection.execute("PRAGMA journal_mode=OFF")
    dbapi_connection.execute("PRAGMA synchronous=OFF")


def load_release(folder: str | Path, db_url: str | None = None, state_dir: str | Path = ".",
                 trust: str | Path | None = None, release: str | None = None) -> LoadedRelease:
    """Verify the bundle against the trust store `trust` (default: the site's, see `trust_for`) as the release
    `release` (DATASET/ID; default where the folder lies), import it unless the database already holds it, and
    return a read-only engine."""
    folder = Path(folder)
    trust = trust_for(folder, trust)
    verified = verify(folder, trust, release)
    manifest = verified.manifest
    started = time.perf_counter()
    # The import parses the very bytes it hashes (_verified_parquets), not the files verify() read.
    rows_expected = _expected_rows(manifest, folder)
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
                if held != (manifest.data_sha256, rows_expected):
                    imported = True
            else:
                imported = True
            if imported:
                # Build a new file beside the old one and rename it into place: the database is whole or absent.
                staging = state / f".{SQLITE_NAME}.{os.getpid()}.tmp"
                staging.unlink(missing_ok=True)
                writer = sa.create_engine(sqlite_url(staging, read_only=False))
                # No journal and no syncs while importing: the file is new and only renamed into place once whole.
                sa.event.listen(writer, "connect", _fast_sqlite)
                try:
                    _import(writer, folder, manifest)
                finally:
                    writer.dispose()
                with open(staging, "rb") as handle:
                    os.fsync(handle.fileno())
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
                imported = _stored_sha(writer) != (manifest.data_sha256, rows_expected)
                if imported:
                    _import(writer, folder, manifest)
            finally:
                writer.dispose()
        engine = _read_only_engine(url, sqlite_path)
        with engine.connect() as conn:  # fail now, not on the first request
            conn.execute(sa.text("SELECT 1"))
    except (sa.exc.SQLAlchemyError, OSError, ImportError) as exc:
        raise ReleaseError(f"database {db_url and sa.make_url(db_url).render_as_string(hide_password=True) or state}:"
                           f" {type(exc).__name__}: {exc}".splitlines()[0]) from None
    columns = [str(c["name"]) for c in sa.inspect(engine).get_columns(DATA_TABLE) if c["name"] != ROW_ID]
    return LoadedRelease(folder=folder, manifest=manifest, engine=engine, db_url=url_for_display,
                         imported=imported, import_seconds=time.perf_counter() - started, columns=columns,
                         seal=verified.seal, trust_file=str(trust))


def _packed_groups(names: list[str], sizes: dict[str, int]) -> list[list[str]]:
    """Columns grouped so that the product of their numbers of labels stays below 2**62 (one BIGINT per group)."""
    groups: list[list[str]] = []
    product = 1
    for name in names:
        size = max(sizes[name], 1)
        if not groups or product * size >= 1 << 62:
            groups.append([])
            product = 1
        groups[-1].append(name)
        product *= size
    return groups


def read_coded_columns(release: LoadedRelease) -> list[Column]:
    """Read the released table from the database (the store of record) as integer codes per column, in row order.

    The database does the encoding: per column, its distinct labels (naturally sorted) give each label a code, and
    one query returns, per record, the codes of several columns packed into one integer (a CASE per column, times a
    stride). A million records then cross into Python as a million small integers instead of millions of strings,
    which is what made reading them slow and large. Columns with very many distinct labels are read as text."""
    table = sa.Table(DATA_TABLE, sa.MetaData(), autoload_with=release.engine)
    names = [name for name in release.columns if name in table.c]
    missing = set(release.columns) - set(names)
    if missing:
        raise ReleaseError(f"{release.db_url}: table {DATA_TABLE} lacks columns {sorted(missing)}")
    order = table.c[ROW_ID]
    with release.engine.connect() as conn:
        n = int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
        labels: dict[str, list[str | None]] = {}
        for name in names:
            values = conn.execute(sa.select(table.c[name]).distinct()).scalars().all()
            # Natural order, and a NULL (shown as MISSING) after everything else.
            labels[name] = sorted(values, key=lambda v: (1, ()) if v is None else (0, label_key(str(v))))
        small = [name for name in names if len(labels[name]) <= MAX_CASE_LABELS]
        codes: dict[str, np.ndarray] = {}
        groups = _packed_groups(small, {name: len(labels[name]) for name in small})
        if groups and n:
            expressions = []
            for group in groups:
                stride, terms = 1, []
                for name in group:
                    whens = {value: i for i, value in enumerate(labels[name]) if value is not None}
                    fallback = labels[name].index(None) if None in labels[name] else 0
                    case = sa.case(whens, value=table.c[name], else_=fallback) if whens else sa.literal(fallback)
                    terms.append(sa.cast(case, sa.BigInteger) * sa.literal(stride, sa.BigInteger))
                    stride *= max(len(labels[name]), 1)
                expressions.append(functools.reduce(operator.add, terms))
            result = conn.execute(sa.select(*expressions).order_by(order))
            packed = np.fromiter((tuple(row) for row in result), dtype=np.dtype((np.int64, len(groups))), count=n)
            for g, group in enumerate(groups):
                rest = packed[:, g].copy()
                for name in group:
                    size = max(len(labels[name]), 1)
                    codes[name] = rest % size
                    rest //= size
        for name in names:
            if name in codes:
                continue
            values = conn.execute(sa.select(table.c[name]).order_by(order)).scalars().all()
            text_labels, codes[name] = encode_labels(values)
            labels[name] = list(text_labels)
    return [Column(name, tuple(MISSING if v is None else str(v) for v in labels[name]),
                   codes[name].astype(code_dtype(len(labels[name])))) for name in names]
