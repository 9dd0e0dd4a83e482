"""Operations: what an operator may see and do, for the ops API, the CLI and the console.

Reads (given a read-only unit of work) and their JSON documents, one pair per concern:

payment_reads.py       one payment with everything that happened to it; the filtered list
payment_documents.py   those as JSON-ready dicts (and the status overview's)
lease_reads.py         leases by state, the audit trail
lease_documents.py     leases, audit rows and command results as JSON-ready dicts
status.py              the on-call overview

Commands (one audited transaction each):

commands.py            takeover of a lease, retry of a needs_attention payment
captures.py            capture or cancel a payment as an operator
refund_sync.py         ask for a payment's refunds to be read at the provider again
events.py              an event's deliveries, redeliver it (webhooks)
errors.py              why a command was refused
"""
