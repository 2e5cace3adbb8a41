"""Browser lockdown policy of the kiosk (data only; a package so that the YAML ships with the project)."""
