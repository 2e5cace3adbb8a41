"""The site's side of the airlock (the store's format and the review rules are outputs/airlock/): the intake that
freezes what enclaves submit (intake.py), the checkers' review pages in the custodian service (review.py,
review_render.py, templates/, static/) and `safeshare airlock` (cli.py)."""
