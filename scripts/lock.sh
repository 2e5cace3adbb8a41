#!/usr/bin/env bash
# Refreshes requirements.lock: the exact version and the sha256 hashes of every package of safeshare's dependency
# closure with all its extras (what ./dev installs), for this machine's Python (the lock names it in its header; 3.11 on linux
# x86_64 here). scripts/setup.sh installs exactly that with `pip --require-hashes`, so every ./dev machine and CI get
# the same packages. pyproject.toml keeps ranges, for people who `pip install safeshare` as a library.
#
#   bash scripts/lock.sh              the newest versions pyproject.toml's ranges allow; then ./dev test (setup.sh
#                                     installs the new lock), and commit requirements.lock with what it needed
#   bash scripts/lock.sh --from-venv  exactly the versions .venv has now (hashes for what was tested there)
#
# Needs the package index (PyPI): pip-compile (pip-tools, in a throwaway virtualenv) resolves and fetches every file's
# hash of each pinned version, so the lock also holds on machines whose pip picks another wheel of the same version.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PIP_TOOLS_VERSION=7.6.2
LOCK=requirements.lock

mode="${1:-newest}"
case "$mode" in
  newest|--from-venv) ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/tools"
"$tmp/tools/bin/pip" install -q "pip-tools==$PIP_TOOLS_VERSION"

args=(--quiet --generate-hashes --upgrade --all-extras --strip-extras --no-emit-index-url --no-emit-find-links
      --output-file "$tmp/$LOCK")
if [[ "$mode" == --from-venv ]]; then
  [[ -x .venv/bin/pip ]] || { echo "lock: no .venv here; run ./dev setup first" >&2; exit 2; }
  .venv/bin/pip freeze --exclude-editable >"$tmp/venv-freeze.txt"
  args+=(--constraint "$tmp/venv-freeze.txt")
fi

echo "lock: resolving and hashing (minutes: every file of every pinned version is hashed)" >&2
CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh${1:+ $1}" "$tmp/tools/bin/pip-compile" "${args[@]}" pyproject.toml

# pip-compile lists the project's own extra (`deploy` needs `safeshare[enclave]`) as a path requirement without a
# hash (with a warning above it), which --require-hashes refuses: setup.sh installs the project itself separately
# (--no-deps -e .).
"$tmp/tools/bin/python" - "$tmp/$LOCK" "$tmp" >"$tmp/$LOCK.clean" <<'EOF'
import sys

path, tmp = sys.argv[1], sys.argv[2]
skipping, warning = False, []
for line in open(path, encoding="utf-8"):
    if line.startswith(("# WARNING: pip install will require", "# Consider using a hashable URL")):
        warning.append(line)  # kept unless the requirement it is about is the project's own
        continue
    if line.startswith("safeshare"):
        skipping, warning = True, []
        continue
    if skipping and line.startswith("    #"):
        continue
    skipping = False
    sys.stdout.write("".join(warning) + line.replace(tmp + "/", ""))
    warning = []
EOF
grep -q -- "--hash=sha256:" "$tmp/$LOCK.clean" || { echo "lock: pip-compile wrote no hashes" >&2; exit 3; }
if grep -q "^# WARNING" "$tmp/$LOCK.clean"; then
  echo "lock: pip-compile warns of a requirement pip --require-hashes would refuse:" >&2
  grep -A3 "^# WARNING" "$tmp/$LOCK.clean" >&2
  exit 3
fi
mv "$tmp/$LOCK.clean" "$LOCK.tmp" && mv "$LOCK.tmp" "$LOCK"
echo "lock: wrote $LOCK ($(grep -c '^[A-Za-z0-9].*==' "$LOCK") packages)" >&2
