"""Building blocks for service and API tests: containers on a real database with fakes
at the provider and broker edges, and a real uvicorn server in a thread."""
