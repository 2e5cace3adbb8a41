"""Issue 25, item 5: the wheel works alone.

The project's wheel is built (from a copy of the sources, as the images build it: deploy.images.wheels), installed
with its engine dependencies only (no extra) into a clean virtualenv (no system site-packages, nothing of this
checkout on its path), at the versions of requirements.lock, and `safeshare deid` runs the demo policy from there.
This catches an engine command that imports a server package (FastAPI, aiohttp, ...) or a data file the wheel does
not carry.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# packages of the extras, none of which the engine may need
EXTRA_ONLY = {"fastapi", "uvicorn", "aiohttp", "sqlalchemy", "docker", "pillow", "dask", "distributed",
              "pytest", "hypothesis", "ansible-core", "websockify", "httpx"}


def locked_versions() -> str:
    """requirements.lock as pip constraints (name==version, no hashes or extras)."""
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s\\;]+)",
                      (REPO / "requirements.lock").read_text(), re.M)
    return "".join(f"{name}=={version}\n" for name, version in pins)


@pytest.mark.slow
def test_the_wheel_runs_deid_in_a_clean_virtualenv(tmp_path: Path) -> None:
    from deploy.images.wheels import project_wheel

    wheel = next(project_wheel(tmp_path / "wheels", say=lambda _: None).glob("safeshare-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    (tmp_path / "constraints.txt").write_text(locked_versions())
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                              "--disable-pip-version-check", "-c", str(tmp_path / "constraints.txt"), str(wheel)],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]

    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json",
                             "--disable-pip-version-check"], capture_output=True, text=True, env=env, timeout=120)
    installed = {re.sub(r"[-_.]+", "-", p["name"]).lower() for p in json.loads(listed.stdout)}
    assert {"safeshare", "numpy", "pandas", "pyarrow", "pydantic", "scipy", "numba"} <= installed   # numba: the default
    # path is the compiled one (engine.kernels)
    assert not installed & EXTRA_ONLY, f"the engine alone pulled in {sorted(installed & EXTRA_ONLY)}"

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import engine; print(engine.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr

    site = tmp_path / "site"
    site.mkdir()  # an empty site: the built-in gate floor
    out = tmp_path / "out"
    result = subprocess.run([str(venv / "bin" / "safeshare"), "deid", str(REPO / "policies/examples/adult-k5.yaml"),
                             "--out", str(out)], capture_output=True, text=True, cwd=tmp_path,
                            env={**env, "SAFESHARE_SITE": str(site)}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == 30_162 and manifest["gate"]["passed"] is True
    assert (out / "data.parquet").is_file() and (out / "report.html").is_file()
