"""The custodian service and its commands: `safeshare provision|revoke|recipients|custodian` (cli.py), the HTTP API
with the auditors' web player (api.py, static/), and the people who sign in to it (people.py, people_cli.py)."""
