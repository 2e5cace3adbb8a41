"""How each service image is meant to run: the least privilege it works with, tested against the real images
(tests/deploy/test_images.py), for docker-compose.yml and provisioning to apply.

Kept as data in the docker SDK's `containers.run` keyword names, with `docker_run_args` for the CLI, so that the
provisioning code and the tests use the very same settings. Networks, volumes and ports are not here: they are
per recipient (provisioning's job).

Why the kiosk keeps five capabilities: its supervisor runs as root to write the managed browser policy and to
start Chromium as safeshare-kiosk (SETUID, SETGID), hands that user its home and profile (CHOWN), cleans them up and
reads the X cookie in them afterwards (DAC_OVERRIDE, FOWNER), and stops the browser's processes (KILL). Without any
one of the first five it does not start (measured); everything else is dropped.
"""
from __future__ import annotations

NO_NEW_PRIVILEGES = ["no-new-privileges:true"]

HARDENING: dict[str, dict] = {
    "app": {
        "read_only": True, "cap_drop": ["ALL"], "security_opt": NO_NEW_PRIVILEGES,
        "tmpfs": {"/tmp": "size=64m", "/state": "size=512m,uid=10001,gid=10001"},
    },
    "gateway": {
        # /sessions and /data are volumes (recordings and the token database outlive the container).
        "read_only": True, "cap_drop": ["ALL"], "security_opt": NO_NEW_PRIVILEGES,
        "tmpfs": {"/tmp": "size=64m"},
    },
    "kiosk": {
        "read_only": True, "cap_drop": ["ALL"], "cap_add": ["SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"],
        "security_opt": NO_NEW_PRIVILEGES, "shm_size": "512m",
        # The managed policy is written at start (it names the app's address), so its folder is a tmpfs too.
        "tmpfs": {"/tmp": "size=512m", "/state": "size=64m", "/etc/chromium/policies/managed": "size=1m"},
    },
}


def docker_run_args(service: str) -> list[str]:
    """HARDENING[service] as `docker run` options."""
    spec = HARDENING[service]
    args: list[str] = []
    if spec.get("read_only"):
        args.append("--read-only")
    for cap in spec.get("cap_drop", []):
        args += ["--cap-drop", cap]
    for cap in spec.get("cap_add", []):
        args += ["--cap-add", cap]
    for option in spec.get("security_opt", []):
        args += ["--security-opt", option]
    if "shm_size" in spec:
        args += ["--shm-size", spec["shm_size"]]
    for path, options in spec.get("tmpfs", {}).items():
        args += ["--tmpfs", f"{path}:{options}" if options else path]
    return args
