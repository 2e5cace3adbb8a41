"""The airlock (issue 27): the only way outputs leave an enclave.

A plain library (no web framework, no deploy imports) shared by the app (drafts, outbox), the host-side intake,
the custodian's review pages, the front door's download and the command line:

- `workspace`: the airlock part of an app workspace (STATE/airlock/...) and safe IO for enclave-writable folders;
- `store`: the airlock store's format (SITE/airlock/<rid>/<request_id>/), allowlist and bounds;
- `records`: the airlock tables of the site database, with the append-only `airlock_events`;
- `workflow`: states, `decide(votes)`, independent review, rounds, the `Airlock` class;
- `package`: the deterministic, signed package.zip and `verify_package`;
- `intake`: freezing a submission from a workspace (`run_intake`, `IntakeLoop`).
"""
