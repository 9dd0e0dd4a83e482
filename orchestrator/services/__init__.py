"""Service functions: the only code that opens units of work and commits."""
