"""The benchmark harness behind ``payorch bench`` (see bench/README.md)."""
