"""Where a site's database is: `SITE/db/safeshare.db`, said once for every tool pointed at a site folder.

A `safeshare up` home is laid out as a site, so the custodian service, the audit commands, provisioning, the gateway
that `up` or provisioning starts, proxy-for and websockify's token plugin all open the same file for one folder. Before
issue 24 (item 12) `up` kept its database at `HOME/safeshare.db`: a service pointed at such a home with `--site`
opened an empty `HOME/db/safeshare.db`, found none of the gateway's anchors and showed every intact session as not
verified, while `audit verify` (without `--db`) passed. So an old home's file is moved by `up` (`migrate_legacy`),
and every other tool refuses a folder that holds one (`site_db_url`) instead of silently opening another, empty one.

A leaf like `safeshare.signing`, so that any package may ask it: deploy.site.folder.Site (and through it provisioning,
the custodian and audit commands, proxy-for and the token plugin) and deploy.local (`up`) do. Only the default SQLite
file is decided here; an explicit `--db` URL wins everywhere.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .signing import TRUST_FILE

DB_DIR = "db"
DB_NAME = "safeshare.db"
LEGACY_DB = "safeshare.db"  # `safeshare up` homes made before issue 24, item 12
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


class SiteDatabaseError(ValueError):
    """A folder whose database cannot be told without guessing (an old `up` home's file, or two files): exit 2."""


def site_db_file(root: str | os.PathLike[str]) -> Path:
    """The SQLite file of the site (or `up` home) at `root`."""
    return Path(root).absolute() / DB_DIR / DB_NAME


def legacy_db_file(root: str | os.PathLike[str]) -> Path | None:
    """`ROOT/safeshare.db` when it exists (an `up` home of the old layout), else None."""
    path = Path(root).absolute() / LEGACY_DB
    return path if path.is_file() else None


def site_db_url(root: str | os.PathLike[str]) -> str:
    """The SQLAlchemy URL of the site's default database. Refuses (SiteDatabaseError) a folder that still holds the
    old layout's `ROOT/safeshare.db`: opening `ROOT/db/safeshare.db` there would show a database without the
    gateway's tokens and anchors, and sessions that verify as unanchored."""
    legacy = legacy_db_file(root)
    if legacy is not None:
        current = site_db_file(root)
        if current.exists():
            raise SiteDatabaseError(f"{legacy} and {current}: two databases in one folder; a site's database is "
                                    f"{current}: keep one (the other holds tokens and anchors this one lacks)")
        raise SiteDatabaseError(
            f"{legacy}: a database of the old `safeshare up` layout; a site's database is {current}: "
            f"`safeshare up --home {legacy.parent}` moves it there, or move it (and its -wal/-shm files) yourself")
    return f"sqlite:///{site_db_file(root)}"


def is_site_folder(folder: str | os.PathLike[str]) -> bool:
    """Whether `folder` is laid out as a site (or an `up` home): it holds `db/safeshare.db` or `trust.json`."""
    folder = Path(folder)
    return site_db_file(folder).is_file() or (folder / TRUST_FILE).is_file()


def enclosing_site(folder: str | os.PathLike[str]) -> Path | None:
    """The site folder `folder` is, or lies in (its nearest such ancestor), else None. A command whose default is a
    file in the current folder asks this before creating one there: a stray database inside a site is a second
    database of that site (site tools then refuse the folder, `site_db_url`) that holds none of its tokens."""
    folder = Path(folder).absolute()
    for candidate in (folder, *folder.parents):
        if is_site_folder(candidate):
            return candidate
    return None


def migrate_legacy(root: str | os.PathLike[str]) -> Path | None:
    """Move an old `up` home's `ROOT/safeshare.db` to `ROOT/db/safeshare.db`; the new path, or None when there was
    nothing to move. Call it only while nothing has the database open (`up` checks that no enclave runs from the
    home first). The write-ahead log is checkpointed into the file before the move, so the move is one rename; a
    home holding both files is refused (SiteDatabaseError), never merged or overwritten."""
    legacy = legacy_db_file(root)
    if legacy is None:
        return None
    target = site_db_file(root)
    if target.exists():
        site_db_url(root)  # raises, naming both files
    connection = sqlite3.connect(legacy)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.DatabaseError as exc:
        raise SiteDatabaseError(f"{legacy}: not a readable SQLite database ({exc}); not moved") from None
    finally:
        connection.close()
    target.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
    for suffix in SQLITE_SIDE_FILES:  # empty after the checkpoint, but a stale -wal must not meet another file
        side = legacy.with_name(legacy.name + suffix)
        if side.exists():
            os.replace(side, target.with_name(target.name + suffix))
    os.replace(legacy, target)
    return target


def create_tables(metadata, engine, attempts: int = 6) -> None:
    """`metadata.create_all(engine)`, tolerating another process creating the same tables at the same moment.

    SQLAlchemy checks which tables exist and then creates the missing ones, in two steps: two processes opening a new
    site together (`safeshare up` starting the custodian service beside the intake, a test opening two stores) can
    both see a table missing, and the slower one fails with "table ... already exists" (PostgreSQL: a duplicate type
    in pg_type). Whoever lost the race finds the tables on the next try, so the error is retried a few times; any
    other error, or the same one persisting, is raised."""
    import time

    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(attempts):
        try:
            metadata.create_all(engine)
            return
        except (OperationalError, ProgrammingError, IntegrityError) as exc:
            text = str(exc)
            if attempt == attempts - 1 or ("already exists" not in text and "pg_type" not in text):
                raise
            time.sleep(0.02 * (attempt + 1))
