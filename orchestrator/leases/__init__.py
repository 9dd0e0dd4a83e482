"""Lease expiry: the takeover the sweeper and operators share, and the sweeper loop."""
