"""The Stripe API version payorch speaks.

It imports nothing (not ``stripe``, nothing of ours): settings reads it for the default of
``stripe_api_version``, the adapter sends it and the simulator refuses any other, so it sits
beside settings at the bottom of the layers rather than in ``providers``.

Stripe changes object shapes between API versions, and the SDK's default version moves with
every major SDK release, so the version is pinned here and sent as ``Stripe-Version`` on every
request.  The adapter's parsing, the cassettes and the simulator are written for it; the
simulator refuses any other version, and the replay suite fails on a cassette recorded with
another one.  To move it: change ``PINNED_API_VERSION`` (and the ``stripe`` range in
pyproject.toml if the new version needs a newer SDK), re-record the cassettes
(``make cassettes``), run the replay and simulator contract suites.
"""

from __future__ import annotations

PINNED_API_VERSION = "2026-10-28.endive"
