"""The few `docker` commands the image build needs, through the CLI (no SDK: the build also runs where only the
engine and its client are installed)."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from deploy.images.rootfs import ImageBuildError

DOCKER = os.environ.get("SAFESHARE_DOCKER", "docker")


def check_engine(docker: str = DOCKER) -> str:
    """The engine's version; raises ImageBuildError when none answers."""
    result = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if result.returncode != 0 or not result.stdout.strip():
        raise ImageBuildError(f"no Docker engine answers ({(result.stderr or result.stdout).strip()[-300:]}); "
                              "start one with scripts/dockerd.sh")
    return result.stdout.strip()


def run_docker(args: Sequence[str], docker: str = DOCKER, check: bool = True) -> str | None:
    """stdout of `docker ARGS`; on failure None (check=False) or ImageBuildError."""
    result = subprocess.run([docker, *args], capture_output=True, text=True)
    if result.returncode != 0:
        if check:
            raise ImageBuildError(f"docker {' '.join(args)}: {result.stderr.strip()[-500:]}")
        return None
    return result.stdout


def image_id(ref: str, docker: str = DOCKER) -> str | None:
    """The image ID of `ref` (a tag or ID), or None if the engine has no such image."""
    result = subprocess.run([docker, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else None


def inspect(ref: str, docker: str = DOCKER) -> dict:
    result = subprocess.run([docker, "image", "inspect", ref], capture_output=True, text=True)
    if result.returncode != 0:
        raise ImageBuildError(f"docker image inspect {ref}: {result.stderr.strip()}")
    return json.loads(result.stdout)[0]


def tag(source: str, *targets: str, docker: str = DOCKER) -> None:
    for target in targets:
        subprocess.run([docker, "tag", source, target], check=True, capture_output=True)


def build(context: Path, tags: Sequence[str], log: Path, build_args: dict[str, str] | None = None,
          labels: dict[str, str] | None = None, network: str = "none", no_cache: bool = False,
          dockerfile: str = "Dockerfile", docker: str = DOCKER) -> str:
    """`docker build` with the classic builder (BuildKit wants to pull its frontend, and there is no registry), no
    network inside RUN steps unless `network` says otherwise; returns the image ID, raises with the log's tail."""
    argv = [docker, "build", "--network", network, "--force-rm", "-f", str(context / dockerfile)]
    for name, value in (build_args or {}).items():
        argv += ["--build-arg", f"{name}={value}"]
    for name, value in (labels or {}).items():
        argv += ["--label", f"{name}={value}"]
    for name in tags:
        argv += ["-t", name]
    if no_cache:
        argv.append("--no-cache")
    argv.append(str(context))
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise ImageBuildError(f"docker build of {tags[0]} failed (log {log}):\n{tail}")
    found = image_id(tags[0], docker)
    if found is None:
        raise ImageBuildError(f"docker build of {tags[0]} reported success but the image is missing")
    return found


def import_tree(root: Path, ref: str, changes: Sequence[str], docker: str = DOCKER) -> str:
    """`docker import` a folder as one layer (tar streamed, numeric owners kept); returns the image ID."""
    with tempfile.TemporaryFile() as tar_err:
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "--xattrs", "--xattrs-include=security.*",
                                "-c", "."], stdout=subprocess.PIPE, stderr=tar_err)
        argv = [docker, "import"]
        for change in changes:
            argv += ["--change", change]
        result = subprocess.run([*argv, "-", ref], stdin=tar.stdout, capture_output=True, text=True)
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
        tar_err.seek(0)
        tar_message = tar_err.read().decode(errors="replace").strip()
    if tar.returncode != 0 or result.returncode != 0:
        raise ImageBuildError(f"docker import of {root} as {ref} failed: {result.stderr.strip()} {tar_message}")
    found = image_id(ref, docker)
    if found is None:
        raise ImageBuildError(f"docker import of {ref} reported success but the image is missing")
    return found
