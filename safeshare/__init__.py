"""The `safeshare` command: one CLI that dispatches to the components (engine, proxy, enclave, deploy)."""
