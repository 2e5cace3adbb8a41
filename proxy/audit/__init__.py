"""What auditors do with recorded sessions: verify their integrity (`verify`), find and summarize them
(`sessions`), decode and prepare them for the player and video export (`rfbdecode`, `player`), and find those past
retention (`retention`). The commands are in deploy/audit/cli.py, the player's HTTP side in deploy/custodian/api.py.
"""
