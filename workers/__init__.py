"""The Celery side: the app, its settings, and thin tasks that call orchestrator services."""
