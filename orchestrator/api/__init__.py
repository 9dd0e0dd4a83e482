"""The HTTP API (FastAPI).  Routes translate HTTP to service calls and back; they never
commit and never hold ORM objects."""
