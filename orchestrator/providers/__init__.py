"""Payment providers behind a small protocol (``base``), observed by one wrapper
(``observed``).  Only the Stripe adapter's modules (``stripe_*``) import the ``stripe`` SDK;
the simulator lives in ``devtools/simulator``."""
