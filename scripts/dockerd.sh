#!/usr/bin/env bash
# Starts the Docker engine (Debian's docker.io) when none answers; idempotent. Prints the server version.
# Logs to ${SAFESHARE_DOCKERD_LOG:-/var/log/safeshare-dockerd.log}. Exit 1 if no engine can be started here.
set -uo pipefail
log="${SAFESHARE_DOCKERD_LOG:-/var/log/safeshare-dockerd.log}"
# Containers on the enclaves' internal networks (bridges named ss-*) must not reach the host's own services either:
# an internal network only stops forwarding, packets to the host's addresses still arrive through INPUT.
host_firewall() {
  command -v iptables >/dev/null || { echo "dockerd.sh: iptables missing: enclave networks could reach the host" >&2; return 1; }
  iptables -C INPUT -i ss-+ -j DROP 2>/dev/null || iptables -I INPUT -i ss-+ -j DROP
}
if docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; then
  host_firewall || exit 1
  docker info --format '{{.ServerVersion}}'; exit 0
fi
if ! command -v dockerd >/dev/null; then
  echo "dockerd.sh: dockerd is not installed (scripts/setup.sh installs docker.io)" >&2; exit 1
fi
if [[ $(id -u) -ne 0 ]]; then echo "dockerd.sh: starting dockerd needs root" >&2; exit 1; fi
mkdir -p "$(dirname "$log")"
# containerd comes with dockerd's own managed instance; setsid keeps it alive after this script's session ends.
setsid dockerd >>"$log" 2>&1 < /dev/null &
for _ in $(seq 1 100); do
  if docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; then
    host_firewall || exit 1
    docker info --format '{{.ServerVersion}}'; exit 0
  fi
  sleep 0.2
done
echo "dockerd.sh: dockerd did not answer within 20 s; last lines of $log:" >&2
tail -n 15 "$log" >&2
exit 1
