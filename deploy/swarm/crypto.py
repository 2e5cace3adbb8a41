"""Whether Swarm's encrypted overlay networks can actually encrypt here.

Docker's `encrypted` overlay option programs IPsec ESP in transport mode with AES-GCM (`rfc4106(gcm(aes))`) in the
kernel of every node with a task on the network. A kernel without ESP or without that AEAD cannot do it, and the
engine only logs that: the network is created, and whether its VXLAN traffic then flows in clear or not at all is
up to the engine's version. So safeshare asks the kernel itself before it creates an encrypted network and refuses
(fail closed) when the answer is no or unknown; a custodian can opt out explicitly, which is audited.

On the control host the probe adds the very state Docker would add, in a throwaway network namespace (`unshare
-n`, root). On another node the release-shipping job asks that node's kernel through AF_ALG for the AEAD
(NODE_PROBE); no answer counts as no.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

AEAD = "rfc4106(gcm(aes))"

# Run by the shipping job on a node (python3 -c): exit 0 when the kernel has the AEAD that encrypted overlays use.
NODE_PROBE = f"""
import socket, sys
try:
    socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET, 0).bind(("aead", "{AEAD}"))
except (OSError, AttributeError) as exc:
    sys.exit(f"this node's kernel cannot do {AEAD} for IPsec ESP ({{exc}})")
"""


@dataclass(frozen=True)
class EncryptionCheck:
    ok: bool
    reason: str


def control_host_check() -> EncryptionCheck:
    """Try to add an ESP transport state with Docker's AEAD in a new network namespace."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return EncryptionCheck(False, "cannot check: `unshare` or `ip` (iproute2) is missing")
    key = "0x" + "11" * 20  # 16 bytes of key, 4 of salt: what rfc4106 takes
    argv = ["unshare", "-n", "ip", "xfrm", "state", "add", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp",
            "spi", "0x100", "reqid", "1", "mode", "transport", "aead", AEAD, key, "64"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return EncryptionCheck(False, f"cannot check: {exc}")
    if done.returncode != 0:
        return EncryptionCheck(False, f"the kernel refuses an IPsec ESP state with {AEAD}: "
                                      f"{done.stderr.strip() or done.returncode}")
    return EncryptionCheck(True, f"IPsec ESP with {AEAD} works in this kernel")


def refusal(reason: str) -> str:
    """The message a provisioning that needs encryption fails with."""
    return (f"overlay networks cannot be encrypted: {reason}. An enclave's traffic between nodes would cross the "
            f"network in clear, so nothing was created. Use a kernel with IPsec ESP and AES-GCM (CONFIG_INET_ESP, "
            f"CONFIG_CRYPTO_GCM), or, only where the link between the nodes is otherwise protected, provision with "
            f"--allow-unencrypted-overlay (audited)")
