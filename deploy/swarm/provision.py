"""The custodian's Provisioner (deploy/provision.py) with the Swarm reconciler (deploy/swarm/reconcile.py) in place of
the single-engine one: the same checks, files, tokens and audit events, enclaves placed on Swarm nodes.

Two things only Swarm has are the custodian's to say: where a recipient must run (`pins`: recipient -> node id or
hostname), and that overlay networks may stay unencrypted where the kernel cannot encrypt them. That opt-out is
never silent: each provisioning that used it is an audit event of its own (`swarm-unencrypted`) besides the note
in the result.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from deploy.provision import ProvisionResult, Provisioner
from deploy.reconcile import ReconcileError
from deploy.site.folder import Site
from deploy.swarm.reconcile import SwarmReconciler, remember_orchestrator

UNENCRYPTED_NOTE = "overlay networks NOT encrypted"
SUBNET_CURSOR_FILE = "swarm-subnets.json"  # where the next-fit allocation of enclave subnets continues


class SwarmProvisioner(Provisioner):
    def __init__(self, site: Site, *, pins: Mapping[str, str] | None = None, allow_unencrypted: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(site, **kwargs)
        self.pins = dict(pins or {})
        self.allow_unencrypted = allow_unencrypted

    def _node_down(self, policy_path: str | Path) -> str | None:
        """The node of the recipient's enclave when that node is no longer ready, else None. A session through a
        kiosk on a lost node does not end by itself (no peer is left to close the connection; the gateway's
        socket waits), so a move off a lost node issues a new token, and revoking the old one ends such sessions
        within the gateway's poll."""
        from policies.recipient import PolicyError, load_recipient_policy

        try:
            rid = self.site.recipient_id(load_recipient_policy(Path(policy_path)).recipient)
            return self.engine.lost_node(rid)
        except (PolicyError, OSError, ReconcileError):
            return None  # provisioning reports these itself

    @property
    def engine(self) -> SwarmReconciler:  # type: ignore[override]
        return SwarmReconciler(self.client, self.site.site_id, ready_timeout=self.ready_timeout, pins=self.pins,
                               allow_unencrypted=self.allow_unencrypted,
                               cursor_file=self.site.root / SUBNET_CURSOR_FILE)

    def provision(self, policy_path: str | Path, actor: str, *, new_token: bool = False,
                  ttl: timedelta | None = None) -> ProvisionResult:
        remember_orchestrator(self.site.root, "swarm")
        down = self._node_down(policy_path)
        result = super().provision(policy_path, actor, new_token=new_token or down is not None, ttl=ttl)
        if down is not None:
            result.notes.append(f"its node {down} is down: the enclave moved, and a new token ended the sessions "
                                f"that were left hanging on the lost kiosk")
        for note in result.notes:
            if note.startswith(UNENCRYPTED_NOTE):
                self.records.audit(actor, "swarm-unencrypted", "ok", result.recipient, note=note,
                                   networks=result.networks)
        return result
