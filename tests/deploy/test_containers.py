"""The enclave in containers with a real Docker engine: images built offline, docker-compose.yml brought up, the
researcher's headless Chromium sees the app through noVNC, and the networks keep kiosk and app in.

The engine is started by scripts/dockerd.sh (which also installs the host rule for the enclave bridges); without an
engine that can start here the module is skipped with the reason. The first image build on a fresh machine takes a
few minutes (debootstrap, packages, wheels); later builds are cached by content.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from tests.cdp import chromium, wait_for_js

REPO = Path(__file__).resolve().parents[2]


def _engine() -> str | None:
    """None when an engine answers (started if needed), else why not."""
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        return "docker.io is not installed (scripts/setup.sh installs it)"
    result = subprocess.run(["bash", str(REPO / "scripts" / "dockerd.sh")], capture_output=True, text=True,
                            timeout=120)
    return None if result.returncode == 0 else f"no Docker engine could start: {result.stderr.strip()[-300:]}"


@pytest.fixture(scope="module")
def images() -> dict:
    reason = _engine()
    if reason:
        pytest.skip(reason)
    result = subprocess.run([sys.executable, "-m", "safeshare.cli", "images", "build", "--json"], cwd=REPO,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {result.stderr.strip()}")
    return result


def test_images_are_offline_built_and_safe(images: dict) -> None:
    assert set(images) == {"app", "gateway", "kiosk"}
    again = subprocess.run([sys.executable, "-m", "safeshare.cli", "images", "build", "--json"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    cached = json.loads(again.stdout)
    assert all(not image["built"] and image["seconds"] < 10 for image in cached.values()), cached  # cache hit
    for service, image in images.items():
        config = json.loads(docker("image", "inspect", image["tag"]).stdout)[0]["Config"]
        assert config.get("Healthcheck", {}).get("Test"), f"{service} has no healthcheck"
        assert config["Entrypoint"][:3] == ["tini", "--", "safeshare"]
        env = " ".join(config.get("Env") or [])
        assert "PASSWORD" not in env.upper() and "TOKEN" not in env.upper()
    assert json.loads(docker("image", "inspect", images["app"]["tag"]).stdout)[0]["Config"]["User"] == "safeshare"
    # no secrets baked in, and the CLI runs with no network at all
    found = docker("run", "--rm", "--network", "none", "--entrypoint", "sh", images["kiosk"]["tag"], "-c",
                   "find / -xdev \\( -name 'vnc-password' -o -name 'safeshare.db' -o -name 'release.sqlite' -o -name 'xauthority' \\) 2>/dev/null; "
                   "id -u safeshare-kiosk; which chromium Xvfb x11vnc").stdout.split()
    assert not [f for f in found if f.startswith("/") and not f.startswith("/usr/bin")], found
    assert docker("run", "--rm", "--network", "none", images["app"]["tag"], "--help").returncode == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def compose(images: dict, tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (scripts/setup.sh installs it)")
    suffix = f"{os.getpid() % 100000}"
    port = _free_port()
    env = {**os.environ, "COMPOSE_PROJECT_NAME": f"sstest{suffix}", "SAFESHARE_ENCLAVE_ID": f"t{suffix}",
           "SAFESHARE_FRONT_SUBNET": "10.215.200.0/24", "SAFESHARE_GATEWAY_IP": "10.215.200.10",
           "SAFESHARE_ENCLAVE_SUBNET": "10.215.201.0/27", "SAFESHARE_VNC_SUBNET": "10.215.201.32/27",
           "SAFESHARE_GATEWAY_PORT": str(port)}

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(["docker-compose", *args], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)

    run("down", "-v")
    try:
        up = run("up", "-d")  # inside: an `up` that times out still leaves nothing behind
        if up.returncode != 0:
            raise AssertionError(f"docker-compose up failed:\n{up.stderr[-2000:]}\n{run('ps').stdout}\n"
                                 f"{run('logs', '--no-color', '--tail', '30').stdout[-4000:]}")
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            logs = run("logs", "--no-color", "token").stdout
            url = next((word for word in logs.split() if word.startswith("http://127.0.0.1")), None)
            time.sleep(0.5)
        assert url, run("logs", "--no-color").stdout[-3000:]
        yield {"url": url, "project": env["COMPOSE_PROJECT_NAME"], "port": port, "run": run}
    finally:
        run("down", "-v", timeout=180)


def _container(project: str, service: str) -> str:
    return f"{project}_{service}_1"


def _probe(container: str, targets: list[tuple[str, int]]) -> dict[str, str]:
    """From inside `container`: which host:port accept a TCP connection (OPEN), refuse, or stay silent."""
    code = ("import socket, json, sys\nout = {}\nfor h, p in json.loads(sys.argv[1]):\n"
            "    try:\n        socket.create_connection((h, p), 2).close(); out[f'{h}:{p}'] = 'OPEN'\n"
            "    except Exception as e:\n        out[f'{h}:{p}'] = type(e).__name__\nprint(json.dumps(out))")
    result = docker("exec", container, "python3", "-c", code, json.dumps(targets), timeout=60)
    return json.loads(result.stdout)


def _gateway_address(project: str, network: str) -> str:
    info = json.loads(docker("network", "inspect", f"{project}_{network}").stdout)[0]
    return info["IPAM"]["Config"][0]["Gateway"] if info["IPAM"]["Config"][0].get("Gateway") else \
        info["IPAM"]["Config"][0]["Subnet"].rsplit(".", 1)[0] + ".1"


def test_networks_keep_kiosk_and_app_in(compose: dict) -> None:
    project = compose["project"]
    kiosk, app = _container(project, "kiosk"), _container(project, "app")
    # a service listening on every address of the host: the enclaves must not reach it
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(8)
    host_port = server.getsockname()[1]
    try:
        host_addresses = [_gateway_address(project, name) for name in ("enclave", "vnc", "front")]
        from_kiosk = _probe(kiosk, [("app", 8050), ("gateway", 6080), ("10.215.200.10", 6080),
                                    *[(address, host_port) for address in host_addresses]])
        from_app = _probe(app, [("kiosk", 5900), ("gateway", 6080), ("10.215.200.10", 6080),
                                *[(address, host_port) for address in host_addresses]])
    finally:
        server.close()
    assert from_kiosk.pop("app:8050") == "OPEN", from_kiosk
    assert "OPEN" not in from_kiosk.values(), from_kiosk  # not the gateway, not the host
    assert from_app.pop("kiosk:5900") == "OPEN"  # the same internal network; the kiosk's VNC needs its password
    assert "OPEN" not in from_app.values(), from_app
    # no network but the internal ones for kiosk and app
    for container, expected in ((kiosk, {"enclave", "vnc"}), (app, {"enclave"})):
        networks = json.loads(docker("inspect", container).stdout)[0]["NetworkSettings"]["Networks"]
        assert {name.split("_", 1)[1] for name in networks} == expected
        for name in networks:
            assert json.loads(docker("network", "inspect", name).stdout)[0]["Internal"] is True
    # release data read-only in the app, and the app's root filesystem read-only
    denied = docker("exec", app, "sh", "-c", "touch /releases/current/x 2>&1; touch /opt/x 2>&1", check=False)
    assert denied.stdout.count("Read-only file system") == 2, denied.stdout


def novnc_sees_the_app(url: str, tmp_path: Path) -> dict[str, object]:
    """Headless Chromium opens a researcher URL: noVNC's state, and two pixels of the kiosk screen it draws (the
    app's dark header bar across the top, a light page below it), or None where they never appeared."""
    seen: dict[str, object] = {}

    async def run() -> None:
        async with aiohttp.ClientSession() as http, chromium(tmp_path, http, window="1400,1000") as cdp:
            await cdp.send("Page.enable")
            await cdp.navigate(url)
            seen["state"] = await wait_for_js(cdp, "window.safeshare && window.safeshare.state === 'connected' "
                                                   "&& window.safeshare.state", timeout=30)
            seen["pixels"] = await wait_for_js(cdp, """(() => {
                const c = document.querySelector('#screen canvas'); if (!c || c.width < 1000) return null;
                const g = c.getContext('2d');
                const top = Array.from(g.getImageData(600, 10, 1, 1).data.slice(0, 3));
                const body = Array.from(g.getImageData(600, 700, 1, 1).data.slice(0, 3));
                return (top[0] + top[1] + top[2] < 250 && body[0] + body[1] + body[2] > 600) ? [top, body] : null;
            })()""", timeout=45)

    asyncio.run(run())
    return seen


def test_researcher_sees_the_app_through_novnc(compose: dict, tmp_path: Path) -> None:
    seen = novnc_sees_the_app(compose["url"], tmp_path)
    assert seen["state"] == "connected" and seen["pixels"]
    sessions = docker("exec", _container(compose["project"], "gateway"), "sh", "-c",
                      "ls /sessions | head -n 1").stdout.strip()
    assert sessions  # the session was recorded on the gateway's volume
    assert docker("exec", _container(compose["project"], "kiosk"), "ls", "/sessions", check=False).returncode != 0
