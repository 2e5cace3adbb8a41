"""The app loads exactly one sealed release bundle, signed by a key the site trusts: anything else is refused (exit 2
at the command line, naming the reason), and the release database follows the bundle it was started with."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from enclave.app import ReleaseError, create_app
from enclave.app.release import META_TABLE, SQLITE_NAME, load_release
from enclave.app.table import CodedTable, label_key
from safeshare.cli import main
from safeshare.signing import SigningKey, canonical
from tests.enclave.test_app_support import (DATA, TestClient, forged_failed_gate_bundle, small_frame,
                                             synthetic_bundle, write_output)


@pytest.fixture
def sealed(tmp_path) -> Path:
    return synthetic_bundle(tmp_path, small_frame())


def refused(folder: Path, tmp_path: Path, capsys, match: str, trust: Path | None = None) -> None:
    """Refused by create_app and by `safeshare app` (exit 2, the folder and the reason on stderr), nothing imported.
    `trust` defaults to the trust store of the site `sealed` and `synthetic_bundle` make (tmp_path/trust.json)."""
    trust = trust or tmp_path / "trust.json"
    with pytest.raises(ReleaseError, match=match) as info:
        create_app(folder, state_dir=tmp_path / "state", trust=trust)
    assert str(folder) in str(info.value)
    assert main(["app", "--bundle", str(folder), "--state", str(tmp_path / "state"), "--port", "0",
                 "--trust", str(trust)]) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and "refused" in err
    assert all(part in err for part in match.split(".*"))
    assert not (tmp_path / "state" / SQLITE_NAME).exists()  # nothing was imported


def test_unsealed_folder_is_refused(sealed, tmp_path, capsys) -> None:
    folder = tmp_path / "out"
    write_output(folder, small_frame())  # a deid output that was never sealed
    refused(folder, tmp_path, capsys, "not sealed")


def test_one_changed_byte_in_the_data_is_refused(sealed, tmp_path, capsys) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(sealed, copy)
    raw = bytearray((copy / "data.parquet").read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (copy / "data.parquet").write_bytes(bytes(raw))
    refused(copy, tmp_path, capsys, "data.parquet")


def test_hand_edited_manifest_is_refused(sealed, tmp_path, capsys) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(sealed, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["risk"]["populations"][0]["pu_su_ratio"] = 0.001
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    refused(copy, tmp_path, capsys, "seal")


def test_failed_gate_is_refused_even_with_a_matching_seal(sealed, tmp_path, capsys) -> None:
    """A hand-written seal (what a writer of the folder can make) is refused for its missing signature; one signed
    with the site's own key (what only the custodian can make) still meets the app's own check of the gate."""
    forged = forged_failed_gate_bundle(tmp_path, small_frame())
    refused(forged, tmp_path, capsys, "signature refused: unsigned")
    seal = json.loads((forged / "seal.json").read_text())
    manifest = json.loads((forged / "manifest.json").read_text())
    seal.update(format="safeshare-seal/2", data_sha256=manifest["data_sha256"], release=manifest["data_sha256"][:16])
    seal["signature"] = SigningKey.load(tmp_path / "keys" / "release-signing.key").sign(canonical(seal))
    (forged / "seal.json").write_text(json.dumps(seal))
    refused(forged, tmp_path, capsys, "gate did not pass")


def test_missing_folder_is_refused(tmp_path, capsys) -> None:
    refused(tmp_path / "nowhere", tmp_path, capsys, "not a folder")


def test_unsigned_bundle_is_refused(sealed, tmp_path, capsys) -> None:
    """A seal without a signature (an older unkeyed seal, or one a writer of the folder wrote) is refused: exit 2."""
    seal = json.loads((sealed / "seal.json").read_text())
    del seal["signature"]
    (sealed / "seal.json").write_text(json.dumps(seal))
    refused(sealed, tmp_path, capsys, "signature refused: unsigned")


def test_wrongly_signed_bundle_is_refused(sealed, tmp_path, capsys) -> None:
    """Signed by a key the site does not trust, or a signature that no longer matches the seal: exit 2."""
    seal = json.loads((sealed / "seal.json").read_text())
    original = dict(seal)
    del seal["signature"]
    seal["signature"] = SigningKey.generate(tmp_path / "forger.key").sign(canonical(seal))
    (sealed / "seal.json").write_text(json.dumps(seal))
    refused(sealed, tmp_path, capsys, "signed by key.*which the site does not trust")
    (sealed / "seal.json").write_text(json.dumps({**original, "sealed_at": "2030-01-01T00:00:00+00:00"}))
    refused(sealed, tmp_path, capsys, "does not match")


def test_raw_data_with_recomputed_hashes_is_refused(sealed, tmp_path, capsys) -> None:
    """Forgery 1 of issue 12: the raw ADULT table as data.parquet, manifest files/data_sha256/records and the seal's
    manifest_sha256 recomputed. The unkeyed seal let the app serve the raw data; the signature does not match."""
    import hashlib

    raw_csv = DATA / "adult" / "adult.csv"
    if not raw_csv.is_file():
        pytest.skip(f"{raw_csv} not found")
    raw = pd.read_csv(raw_csv, sep=";")
    raw.to_parquet(sealed / "data.parquet")
    data_sha = hashlib.sha256((sealed / "data.parquet").read_bytes()).hexdigest()
    manifest = json.loads((sealed / "manifest.json").read_text())
    manifest.update(records=len(raw), data_sha256=data_sha, files={"data.parquet": data_sha},
                    transformation={name: 0 for name in raw.columns})
    (sealed / "manifest.json").write_text(json.dumps(manifest))
    seal = json.loads((sealed / "seal.json").read_text())
    seal.update(manifest_sha256=hashlib.sha256((sealed / "manifest.json").read_bytes()).hexdigest(),
                data_sha256=data_sha, release=data_sha[:16])
    (sealed / "seal.json").write_text(json.dumps(seal))
    refused(sealed, tmp_path, capsys, "signature by key.*does not match")


def test_trust_store_given_or_found(sealed, tmp_path, monkeypatch, capsys) -> None:
    """Without --trust the app checks against the site's trust store ($SAFESHARE_SITE, else the default site),
    never one near the bundle; --trust or $SAFESHARE_TRUST name one, and a missing trust store is a refusal naming
    it (fail closed)."""
    import safeshare.sitefolder

    monkeypatch.setattr(safeshare.sitefolder, "DEFAULT_SITE", tmp_path / "no-default-site")
    monkeypatch.delenv("SAFESHARE_SITE", raising=False)
    with pytest.raises(ReleaseError, match="no trust store"):
        create_app(sealed, state_dir=tmp_path / "state0")  # RELEASES/../trust.json is not asked
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path))
    app = create_app(sealed, state_dir=tmp_path / "state0")
    assert app.state.ctx.seal["signature"]["key_id"] == SigningKey.load(tmp_path / "keys" /
                                                                        "release-signing.key").key_id
    assert app.state.ctx.release.trust_file == str(tmp_path / "trust.json")
    app.state.ctx.release.engine.dispose()
    copy = tmp_path / "elsewhere" / sealed.parent.name / sealed.name  # a copy that still names its release
    shutil.copytree(sealed, copy)
    refused(copy, tmp_path, capsys, "trust store missing", trust=tmp_path / "missing.json")
    monkeypatch.setenv("SAFESHARE_SITE", str(tmp_path / "elsewhere"))
    with pytest.raises(ReleaseError, match="trust store missing"):
        create_app(copy, state_dir=tmp_path / "state")
    monkeypatch.setenv("SAFESHARE_TRUST", str(tmp_path / "trust.json"))
    from enclave.app.cli import import_in_child
    from safeshare.cli import build_parser

    args = build_parser().parse_args(["app", "--bundle", str(copy)])
    assert args.trust == str(tmp_path / "trust.json")
    assert import_in_child(copy, None, tmp_path / "state", Path(args.trust)) is None


def test_synthetic_bundle_serves_naturally_ordered_labels(sealed, tmp_path) -> None:
    app = create_app(sealed, state_dir=tmp_path / "state", trust=tmp_path / "trust.json")
    with TestClient(app) as client:
        info = client.get("/api/release").json()
        ages = [v["label"] for v in info["attributes"][1]["values"]]
        assert ages == ["9-10", "10-19", "[20, 40[", "40+", "*"]
        assert client.post("/api/count", json={"exclude_suppressed": True}).json()["count"] == 38
        assert client.post("/api/count", json={"filters": {"age": ["*"]}}).json()["count"] == 2
        assert client.get("/").status_code == 200 and "Testland" in client.get("/").text


def test_label_order_and_codes() -> None:
    assert sorted(["*", ">50K", "<=50K"], key=label_key) == ["<=50K", ">50K", "*"]
    table = CodedTable.from_frame(pd.DataFrame({"a": ["x", "*", "y", "x"], "b": ["1", "*", "2", "1"]}), ["a", "b"])
    assert table.suppressed.tolist() == [False, True, False, False]
    assert table.count({"a": ["x"], "b": ["1", "2"]}) == 2
    assert table.crosstab("a", "b").tolist() == [[2, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_database_is_reimported_only_for_another_bundle(tmp_path) -> None:
    first = synthetic_bundle(tmp_path / "one", small_frame())
    other_frame = small_frame()
    other_frame.loc[0, "site"] = "west"
    second = synthetic_bundle(tmp_path / "two", other_frame)
    state = tmp_path / "state"

    def held(release) -> str:
        with release.engine.connect() as conn:
            return dict(conn.execute(sa.text(f"SELECT key, value FROM {META_TABLE}")).all())["data_sha256"]

    a = load_release(first, state_dir=state, trust=tmp_path / "one" / "trust.json")
    assert a.imported and held(a) == a.manifest.data_sha256
    a.engine.dispose()
    again = load_release(first, state_dir=state, trust=tmp_path / "one" / "trust.json")
    assert not again.imported
    again.engine.dispose()
    b = load_release(second, state_dir=state, trust=tmp_path / "two" / "trust.json")
    assert b.imported and held(b) == b.manifest.data_sha256 != a.manifest.data_sha256
    b.engine.dispose()
    app = create_app(second, state_dir=state, trust=tmp_path / "two" / "trust.json")
    assert "west" in app.state.ctx.table.column("site").labels
    app.state.ctx.release.engine.dispose()


@pytest.mark.parametrize("case_limit", [1000, 0])
def test_reading_codes_from_the_database(tmp_path, monkeypatch, case_limit) -> None:
    """Packed CASE codes and the text fallback give the same table; a NULL becomes a value of its own."""
    import enclave.app.release as release_module
    from enclave.app.release import LoadedRelease, read_coded_columns

    monkeypatch.setattr(release_module, "MAX_CASE_LABELS", case_limit)
    path = tmp_path / "db.sqlite"
    engine = sa.create_engine(f"sqlite:///{path}")
    rows = [(i, ["b", "a", None, "10-19", "9-10"][i % 5], f"v{i % 7}") for i in range(50)]
    with engine.begin() as conn:
        conn.exec_driver_sql('CREATE TABLE release_data (row_id INTEGER PRIMARY KEY, "x y" TEXT, z TEXT)')
        conn.exec_driver_sql("INSERT INTO release_data VALUES (?, ?, ?)", rows)
    loaded = LoadedRelease(folder=tmp_path, manifest={"data_sha256": "0" * 64}, engine=engine, db_url=str(path),
                           imported=False, import_seconds=0.0, columns=["x y", "z"])
    columns = {column.name: column for column in read_coded_columns(loaded)}
    engine.dispose()
    x = columns["x y"]
    assert x.labels[:4] == ("9-10", "10-19", "a", "b") and x.labels[4] == "(missing)"
    assert [x.labels[c] for c in x.codes] == [r[1] if r[1] is not None else "(missing)" for r in rows]
    assert [columns["z"].labels[c] for c in columns["z"].codes] == [r[2] for r in rows]


def test_listening_socket_sends_without_delay() -> None:
    """TCP_NODELAY on accepted sockets (asyncio sets it only for proto IPPROTO_TCP): otherwise every keep-alive
    response waits ~40 ms for a delayed ACK."""
    import socket

    from enclave.app.cli import _listen

    sock = _listen("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()


def test_data_changed_between_verification_and_import_is_refused(sealed, tmp_path, monkeypatch) -> None:
    """The import reads the bytes it hashes itself: a swap right after verify_bundle does not get in."""
    import enclave.app.release as release_module

    copy = tmp_path / "copy" / sealed.parent.name / sealed.name
    shutil.copytree(sealed, copy)
    real_verify = release_module.verify

    def verify_then_swap(folder, *args):
        verified = real_verify(folder, *args)
        write_output(tmp_path / "other", small_frame().iloc[:10])
        shutil.copy(tmp_path / "other" / "data.parquet", copy / "data.parquet")
        return verified

    monkeypatch.setattr(release_module, "verify", verify_then_swap)
    with pytest.raises(ReleaseError, match="changed after verification"):
        load_release(copy, state_dir=tmp_path / "state", trust=tmp_path / "trust.json")
    assert not (tmp_path / "state" / SQLITE_NAME).exists()
