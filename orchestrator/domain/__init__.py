"""The domain: pure data and pure functions, no I/O."""
