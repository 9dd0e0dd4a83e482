"""Every exit status of ``payorch``, in one place (decision 0090; the CLI reference lists them).

Scripts and supervisors act on these, so each means one thing across every command:

====  ==================  =====================================================================
code  name                meaning
====  ==================  =====================================================================
0                         done; ``status``: healthy
1     EXIT_FAILED         ``status``: something waits for a person (a payment needs attention,
                          a lease expired); other commands: the operation was refused or failed
2     EXIT_INVALID        usage: an unknown option, a bad argument (click's own code, reused by
                          our commands for an argument they refuse)
3     EXIT_NOT_FOUND      no such payment, client or account
4     EXIT_CONFLICT       the payment's state forbids the command now
5     EXIT_PRECONDITION   ``--if-match``: the lease changed since it was read
69    EX_UNAVAILABLE      a service the command needs cannot be used: the database cannot be
                          reached or was never migrated, or a development tool is not installed
78    EX_CONFIG           the configuration is invalid (a ``PAYORCH_*`` variable)
====  ==================  =====================================================================

69 and 78 are ``sysexits.h``'s ``EX_UNAVAILABLE`` and ``EX_CONFIG``: far from click's 1 and
2, so "cannot reach the database" is never mistaken for "unhealthy" or for a typo.
"""

from __future__ import annotations

from orchestrator.settings_loading import EX_CONFIG as SETTINGS_EX_CONFIG

EXIT_FAILED = 1
EXIT_UNHEALTHY = 1  # payorch status: the same 1, named for what a check script reads
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_PRECONDITION_FAILED = 5
EX_UNAVAILABLE = 69
EX_CONFIG = SETTINGS_EX_CONFIG  # orchestrator.settings_loading exits with it too
