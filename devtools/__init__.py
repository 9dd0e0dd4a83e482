"""Development tools: the Stripe-compatible provider simulator and the embedded demo.

Installed by ``make demo`` / ``make test`` (the package's ``[test]`` extra pulls nothing extra:
it is part of the source checkout) and never part of the production image (the Dockerfile's
production stage copies ``orchestrator/`` and ``workers/`` only).  Production code never
imports this package; the two CLI commands that start these tools (``payorch demo``,
``payorch provider-sim``) import it lazily and say so plainly when it is absent
(``tests/unit/test_production_never_imports_devtools.py``).
"""
