"""Payment providers behind a small protocol (``base``).  Only ``stripe_adapter`` imports
the ``stripe`` SDK; the simulator lives in ``simulator``."""
