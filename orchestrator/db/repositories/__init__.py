"""Repositories: named queries over one connection, returning plain dataclasses."""
