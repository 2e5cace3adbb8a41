"""Root filesystem folders (rootfs.py) turned into Docker images without a registry.

- The base folder is `docker import`ed as one layer: `safeshare/layer-base:<key>`.
- A derived folder (the kiosk) becomes a layer ON TOP of a given parent image: a build context holding only what apt
  added or changed (`changes.json` of the folder, as a tar that `ADD` unpacks, owners and modes kept) and a `RUN rm`
  of what it removed. So the kiosk image shares the base's layer instead of carrying a second copy of it, and the
  parent can be the runtime image (base + the Python dependencies), which makes that big layer shared by all three
  service images too.

Tags are content keys: when the tag exists the image is reused as it is (seconds), unless forced.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

from deploy.images import dockercli
from deploy.images.rootfs import ImageBuildError

# Image names: <REPOSITORY>/<name>:<key>. Another value keeps a trial build apart from the images in use, or names a
# site registry's namespace.
REPOSITORY = os.environ.get("SAFESHARE_IMAGE_REPOSITORY", "safeshare")
IMPORT_CHANGES = ("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV LANG=C.UTF-8",
                  "CMD [\"/bin/sh\"]")


def _layer_info(folder: Path) -> dict:
    return json.loads((folder / "layer.json").read_text())


def import_base(folder: Path, force: bool = False, docker: str = dockercli.DOCKER) -> tuple[str, bool]:
    """(tag, imported now) of the base folder as `safeshare/layer-base:<key>`."""
    info = _layer_info(folder)
    ref = f"{REPOSITORY}/layer-{info['name']}:{info['key']}"
    if not force and dockercli.image_id(ref, docker) is not None:
        return ref, False
    dockercli.import_tree(folder / "rootfs", ref, IMPORT_CHANGES, docker)
    dockercli.tag(ref, f"{REPOSITORY}/layer-{info['name']}:latest", docker=docker)
    return ref, True


def derived_ref(folder: Path, parent_id: str) -> str:
    """The tag of a derived layer on a given parent image: it changes with either."""
    info = _layer_info(folder)
    key = hashlib.sha256(f"{parent_id}\0{info['key']}".encode()).hexdigest()[:16]
    return f"{REPOSITORY}/layer-{info['name']}:{key}"


def build_derived(folder: Path, parent: str, log: Path, force: bool = False,
                  docker: str = dockercli.DOCKER) -> tuple[str, bool]:
    """(tag, built now) of the derived folder's changes as a layer on `parent` (a tag or image ID)."""
    parent_id = dockercli.image_id(parent, docker)
    if parent_id is None:
        raise ImageBuildError(f"the parent image {parent} does not exist")
    ref = derived_ref(folder, parent_id)
    if not force and dockercli.image_id(ref, docker) is not None:
        return ref, False
    changes = json.loads((folder / "changes.json").read_text())
    with tempfile.TemporaryDirectory(prefix=".ctx-layer-", dir=folder.parent) as tmp:
        context = Path(tmp)
        listing = "\0".join(changes["added"]).encode()
        # --no-recursion: a changed folder brings its own metadata, not its whole content.
        tar = subprocess.run(["tar", "-C", str(folder / "rootfs"), "--numeric-owner", "--xattrs",
                              "--xattrs-include=security.*", "--no-recursion", "--null", "-T", "-", "-cf",
                              str(context / "layer.tar")], input=listing, capture_output=True)
        if tar.returncode != 0:
            raise ImageBuildError(f"tar of the {folder.name} changes failed: {tar.stderr.decode().strip()[-1000:]}")
        lines = ["ARG BASE", "FROM ${BASE}", "ADD layer.tar /"]
        if changes["removed"]:
            lines.append("RUN " + json.dumps(["rm", "-rf", "--", *changes["removed"]]))
        (context / "Dockerfile").write_text("\n".join(lines) + "\n")
        info = _layer_info(folder)
        dockercli.build(context, [ref, f"{REPOSITORY}/layer-{info['name']}:latest"], log,
                        build_args={"BASE": parent},
                        labels={"org.safeshare.layer": info["name"], "org.safeshare.layer-key": info["key"]},
                        no_cache=force, docker=docker)
    return ref, True
