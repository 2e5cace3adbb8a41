#!/usr/bin/env bash
# Starts the Docker engine (Debian's docker.io) when none answers; idempotent; reports what it can do.
#   bash scripts/dockerd.sh [start|status] [--json] [--log FILE]
# Exit 0: an engine runs and its networks can keep enclaves in (dockerd manages iptables, and the host rule
# `iptables -I INPUT -i ss-+ -j DROP` is in place); 3: an engine runs but networks are NOT isolated; 1: no engine.
# dockerd logs to ${SAFESHARE_DOCKERD_LOG:-/var/log/safeshare-dockerd.log}. The logic is in deploy/dockerd.py
# (standard library only, so this works before the virtualenv exists).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py=python3
[[ -x .venv/bin/python ]] && py=.venv/bin/python
exec "$py" -m deploy.dockerd "$@"
