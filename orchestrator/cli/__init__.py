"""The ``payorch`` command line (typer + rich)."""
