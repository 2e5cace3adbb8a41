"""A custodian's site: its folder and settings (folder.py), its signing keys' history (key_rotation.py), and a site of
several hosts installed with Ansible (`safeshare site`: cli.py, artifacts.py, playbook.py and the roles in ansible/)."""
