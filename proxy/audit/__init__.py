"""What auditors do with recorded sessions: verify their integrity (`verify`), find and summarize them
(`sessions`). `safeshare audit ...` is in `cli`."""
