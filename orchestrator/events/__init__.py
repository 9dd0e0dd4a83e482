"""Events out: the outbox relay and signed merchant webhooks.

Every state change writes an outbox row in the transaction that made it (``outbox_events``,
written by ``orchestrator.db.repositories.outcomes``).  From there::

    outbox row --(relay: fan-out, FOR UPDATE SKIP LOCKED)--> one delivery per subscribed
    endpoint, status pending
    pending --claim (lease, SKIP LOCKED)--> attempt (HTTP POST, no transaction open)
        2xx                               -> delivered
        410                               -> endpoint disabled, delivery failed
        other / timeout / refused target  -> pending again at now + full-jitter backoff,
                                             or failed once WEBHOOK_RETRY_HOURS ran out
                                             (and the endpoint disabled if it failed the
                                             whole window without one success)
    delivered / failed --ops redeliver--> pending (a new retry window)

Modules, one job each: ``secret_box`` (endpoint secrets encrypted at rest), ``url_rules``
(SSRF: which targets may be called), ``signing`` (Standard Webhooks headers), ``schedule``
(backoff and the retry window), ``event_documents`` (events, endpoints and deliveries as
the merchant sees them), ``event_reads`` (a merchant's events), ``endpoints`` (the endpoints
service), ``sender`` (one HTTP attempt), ``relay`` (fan-out, claim, attempt,
record), ``retention``.  The records, the event types (extend the list there) and the ids
are the domain's (``domain.webhooks``, ``domain.event_types``, ``domain.ids``): the
repositories, below this package, return and write them.  What operators do with an event
(its deliveries, redeliver) is ``orchestrator.ops.events``.
"""
