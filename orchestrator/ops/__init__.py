"""Operations: what an operator may see and do, for the ops API and the CLI alike.

queries.py         leases by state, the audit trail
commands.py        takeover of a lease, retry of a needs_attention payment
errors.py          why a command was refused
representation.py  records and audit rows as JSON-ready dicts
events.py          an event's deliveries, redeliver it (webhooks)
"""
