"""Two processes opening a new site's database at the same moment both create its tables without an error."""
from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest


def _open_every_store(url: str, barrier, errors) -> None:
    try:
        from deploy.custodian.people import People
        from deploy.records import Records
        from outputs.airlock.records import AirlockRecords
        from proxy.db import make_engine

        barrier.wait(10)
        for store in (AirlockRecords, Records, People):
            engine = make_engine(url)
            try:
                store(engine)
            finally:
                engine.dispose()
    except Exception as exc:  # reported to the parent, which fails the test with it
        errors.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("round_", range(3))
def test_stores_opened_together_on_a_new_sqlite_file(tmp_path: Path, round_: int) -> None:
    url = f"sqlite:///{tmp_path / 'safeshare.db'}"
    context = multiprocessing.get_context("spawn")
    barrier, errors = context.Barrier(4), context.Queue()
    workers = [context.Process(target=_open_every_store, args=(url, barrier, errors)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert all(worker.exitcode == 0 for worker in workers)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []


def test_other_errors_are_raised(tmp_path: Path) -> None:
    from sqlalchemy import Column, Integer, MetaData, Table, create_engine
    from sqlalchemy.exc import OperationalError

    from safeshare.sitedb import create_tables

    engine = create_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")  # a folder that does not exist
    metadata = MetaData()
    Table("t", metadata, Column("id", Integer, primary_key=True))
    with pytest.raises(OperationalError):
        create_tables(metadata, engine)
