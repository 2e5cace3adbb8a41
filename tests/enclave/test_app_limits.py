"""The app's bounds (issue 12, item 12): the 1 MiB body cap holds for chunked bodies, counted as they stream, and a
refused body is neither read to its end nor echoed; ids too large for SQLite name nothing (404, not 500); the
workspace of saved analyses is bounded in count and in size, with clear errors. The body tests talk HTTP/1.1 over a
socket to `safeshare app` running as a process, since streaming is the server's business."""
from __future__ import annotations

import json
import re
import select
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from enclave.app import create_app
from enclave.app.security import MAX_BODY
from enclave.app.workspace import MAX_PARAMS_BYTES, MAX_SAVED, WORKSPACE_NAME
from tests.enclave.test_app_support import SAFESHARE, TestClient, free_port, read_ready, small_frame, synthetic_bundle

REPO = Path(__file__).resolve().parents[2]
HUGE = 10 ** 30  # beyond SQLite's 64-bit integers: sqlite3 raised OverflowError


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[int]:
    root = tmp_path_factory.mktemp("app")
    bundle = synthetic_bundle(root, small_frame())
    port = free_port()
    proc = subprocess.Popen([*SAFESHARE, "app", "--bundle", str(bundle), "--state", str(root / "state"),
                             "--host", "127.0.0.1", "--port", str(port), "--site", str(root)],
                            cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        read_ready(proc, 60)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stream(port: int, path: str, total: int, head: bytes = b"", content_type: str = "application/json",
           chunk: int = 64 * 1024) -> tuple[int, bytes]:
    """POST a chunked body of `total` bytes (`head`, then 'A's), stopping as soon as the server answers; returns how
    many body bytes were sent and the raw response."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(120)  # a guard against a hang, not a measured time
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
                 f"Transfer-Encoding: chunked\r\n\r\n".encode())
    sent = 0
    try:
        while sent < total:
            if select.select([sock], [], [], 0)[0]:  # the server has answered (or closed): stop sending
                break
            data = (head if sent == 0 else b"") + b"A" * chunk
            data = data[:total - sent]
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            sent += len(data)
        else:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    response = b""
    try:
        while part := sock.recv(1 << 16):
            response += part
            if re.search(rb"\r\n\r\n", response) and _complete(response):
                break
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return sent, response


def _complete(response: bytes) -> bool:
    head, _, body = response.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *([0-9]+)", head)
    return length is not None and len(body) >= int(length.group(1))


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def header(response: bytes, name: str) -> str | None:
    head = response.partition(b"\r\n\r\n")[0].decode("latin-1")
    found = re.search(rf"(?im)^{name}: *(.*?)\r?$", head)
    return found.group(1) if found else None


def test_a_200_mb_chunked_post_is_refused_without_being_read(server) -> None:
    total = 200 * 1024 * 1024
    sent, response = stream(server, "/api/count", total, head=b'{"filters": {"sex": ["')
    assert status_of(response) == 413, response[:300]
    body = response.partition(b"\r\n\r\n")[2]
    assert json.loads(body)["detail"].startswith("request body too large") and b"AAAA" not in body
    assert header(response, "connection") == "close"  # the rest is not read (and discarded) by the server
    assert sent < 32 * 1024 * 1024, sent  # the cap, plus what the sockets' buffers held when the answer came
    # the form that saves an analysis reads its body itself: the same bound, as an error page
    sent, response = stream(server, "/analyses", 8 * MAX_BODY, head=b"kind=cohort&name=x&params=",
                            content_type="application/x-www-form-urlencoded")
    assert status_of(response) == 413 and b"<title>safeshare" in response and b"AAAA" not in response
    # and the server still answers
    assert httpx.get(f"http://127.0.0.1:{server}/api/release", timeout=30).status_code == 200


def test_chunked_bodies_under_the_cap_are_served(server) -> None:
    padding = b" " * (MAX_BODY - 1000)  # JSON allows whitespace: a body just under the cap
    body = b'{"filters": {"sex": ["f"]}' + padding + b"}"
    sent, response = stream(server, "/api/count", len(body), head=body, chunk=0)
    assert status_of(response) == 200, response[:300]
    assert json.loads(response.partition(b"\r\n\r\n")[2])["count"] == 19


def test_a_content_length_over_the_cap_is_refused_and_the_connection_closed(server) -> None:
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.settimeout(60)
        sock.sendall(f"POST /api/count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {200 * 1024 * 1024}\r\n\r\n".encode())
        response = b""
        while part := sock.recv(1 << 16):  # b"" once the server has closed
            response += part
    assert status_of(response) == 413 and header(response, "connection") == "close"


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("app")
    app = create_app(synthetic_bundle(root, small_frame()), state_dir=root / "state", trust=root / "trust.json")
    with TestClient(app) as test_client:
        test_client.state_dir = root / "state"  # type: ignore[attr-defined]
        yield test_client


def test_huge_ids_name_nothing(client) -> None:
    for path in [f"/api/analyses/{HUGE}", f"/api/analyses/-{HUGE}", f"/api/analyses/{2 ** 63}", "/api/analyses/0"]:
        response = client.get(path)
        assert response.status_code in (404, 422), (path, response.status_code)
        assert "detail" in response.json()
    page = client.get(f"/analyses/{HUGE}", follow_redirects=False)
    assert page.status_code == 404 and "no saved analysis" in page.text
    assert client.post(f"/analyses/{HUGE}/delete", follow_redirects=False).status_code == 303
    for saved in [str(HUGE), "²", "1" * 5000]:  # the banner of a page opened from a saved analysis
        assert client.get("/cohort", params={"saved": saved}).status_code == 200, saved
    # a Content-Length that is not a plain number is refused, not a crash ('²'.isdigit() is true)
    assert client.post("/api/count", content=b"{}", headers={"content-length": "²".encode("latin-1"),
                                                             "content-type": "application/json"}).status_code == 413


def test_saved_analyses_have_a_size_cap(client) -> None:
    big = [["where", f"sex={'x' * 200}"] for _ in range(200)]  # within the request model, over the size cap
    assert len(json.dumps(big)) > MAX_PARAMS_BYTES
    refused = client.post("/api/analyses", json={"name": "big", "kind": "cohort", "params": big})
    assert refused.status_code == 413 and "at most" in refused.json()["detail"]
    query = "&".join(f"where=sex%3D{'x' * 200}" for _ in range(200))
    page = client.post("/analyses", data={"kind": "cohort", "name": "big", "params": query})
    assert page.status_code == 413 and "at most" in page.text
    assert all(item["name"] != "big" for item in client.get("/api/analyses").json())
    small = client.post("/api/analyses", json={"name": "ok", "kind": "cohort", "params": big[:10]})
    assert small.status_code == 200


def test_saved_analyses_have_a_count_cap(client) -> None:
    with sqlite3.connect(client.state_dir / WORKSPACE_NAME) as conn:  # type: ignore[attr-defined]
        (count,) = conn.execute("SELECT COUNT(*) FROM analyses").fetchone()
        conn.executemany("INSERT INTO analyses (name, kind, params, dataset, release, created_at) "
                         "VALUES (?, 'cohort', '[]', 'synth', 'r', '2026-01-01T00:00:00+00:00')",
                         [(f"n{i}",) for i in range(MAX_SAVED - 1 - count)])
    assert client.post("/api/analyses", json={"name": "last", "kind": "cohort"}).status_code == 200
    full = client.post("/api/analyses", json={"name": "one too many", "kind": "cohort"})
    assert full.status_code == 409 and "delete some" in full.json()["detail"]
    page = client.post("/analyses", data={"kind": "cohort", "name": "one too many", "params": ""})
    assert page.status_code == 409 and "delete some" in page.text
    last = next(item for item in client.get("/api/analyses").json() if item["name"] == "last")
    assert client.post(f"/analyses/{last['id']}/delete", follow_redirects=False).status_code == 303
    assert client.post("/api/analyses", json={"name": "room again", "kind": "cohort"}).status_code == 200
