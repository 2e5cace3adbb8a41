"""The site's side of auditing: `safeshare audit` (verify, sessions, export, retention, checkpoint) with the site's
defaults, the sequence checks against its database, retention of recorded sessions, and the bounds on what the
custodian service logs for requests anyone can send. The work on a session folder itself is proxy/audit/."""
