"""Fakes we wrote for the edges of unit and service tests (preferred to unittest.mock)."""
