"""A throwaway PostgreSQL server for the tests that check PostgreSQL support (token store, app release database)."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.proxy.rfbtools import free_port, stop_process, wait_port


@pytest.fixture
def postgres_url():
    """A throwaway PostgreSQL server (initdb into a temporary folder, trust auth, 127.0.0.1 and a free port)."""
    with postgres_server() as url:
        yield url


@contextlib.contextmanager
def postgres_server(password: str | None = None):
    """Start a throwaway PostgreSQL server and yield its URL (user `safeshare`, database `postgres`, no password in
    the URL); with `password`, connections must give it (scram-sha-256), else every local connection is trusted."""
    pytest.importorskip("psycopg")
    bindir = Path("/usr/lib/postgresql")
    candidates = sorted(bindir.glob("*/bin/initdb")) if bindir.is_dir() else []
    initdb = shutil.which("initdb") or (str(candidates[-1]) if candidates else None)
    if initdb is None:
        pytest.skip("PostgreSQL server binaries not installed")
    postgres = str(Path(initdb).with_name("postgres"))
    as_user: dict = {}
    root = tempfile.mkdtemp(prefix="safeshare-pg-")
    if os.geteuid() == 0:  # postgres refuses to run as root
        import pwd

        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a postgres user")
        os.chown(root, user.pw_uid, user.pw_gid)
        as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    proc = None
    try:
        data = Path(root) / "data"
        auth = ["-A", "trust"]
        if password is not None:
            pwfile = Path(root) / "pwfile"
            pwfile.write_text(password + "\n")
            if as_user:
                os.chown(pwfile, as_user["user"], as_user["group"])
            auth = ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
        subprocess.run([initdb, "-D", str(data), *auth, "-U", "safeshare", "--no-sync"],
                       check=True, capture_output=True, timeout=60, **as_user)
        port = free_port()
        proc = subprocess.Popen([postgres, "-D", str(data), "-k", root, "-p", str(port), "-h", "127.0.0.1", "-F",
                                 "-c", "full_page_writes=off"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **as_user)
        wait_port(port, 30, proc)
        yield f"postgresql+psycopg://safeshare@127.0.0.1:{port}/postgres"
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                stop_process(proc)
        shutil.rmtree(root, ignore_errors=True)
