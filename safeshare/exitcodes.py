"""Exit codes of every `safeshare` command, in one place so that scripts and operators can rely on them.

0 success; 1 refused (a policy, gate, signature or check said no: nothing unsafe was done); 2 bad input (a file,
field or option that cannot be used, named on stderr); 3 failed (the work could not be completed: nothing half-done
is left). Some commands give 1 and 3 a more specific name below; the numbers stay the same.
"""
from __future__ import annotations

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2
EXIT_FAILED = 3

EXIT_FINDINGS = EXIT_REFUSED        # `audit verify`: something did not verify
EXIT_NO_ENGINE = EXIT_REFUSED       # `engine`: no Docker engine answers
EXIT_NOT_ISOLATED = EXIT_FAILED     # `engine`: an engine runs, but its networks cannot keep enclaves in

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_FINDINGS", "EXIT_NOT_ISOLATED", "EXIT_NO_ENGINE", "EXIT_OK",
           "EXIT_REFUSED"]
