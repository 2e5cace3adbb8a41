"""`safeshare` registers every subcommand without loading what only running one needs: numpy, pandas, pydantic,
FastAPI, SQLAlchemy, aiohttp and the Docker SDK load when a command uses them (benchmarks/startup_bench.py measures
the seconds)."""
from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("aiohttp", "docker", "fastapi", "numpy", "pandas", "pyarrow", "pydantic", "scipy", "sqlalchemy", "yaml")


def loaded_after(code: str) -> list[str]:
    probe = (f"{code}\nimport json, sys\n"
             f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_registering_every_subcommand_loads_nothing_heavy():
    assert loaded_after("from safeshare.cli import build_parser\nbuild_parser()") == []


def test_the_engine_package_loads_its_dependencies_when_used():
    assert loaded_after("import engine, enclave.app, enclave.kiosk") == []
    assert "pydantic" in loaded_after("import engine\nengine.load_policy")
