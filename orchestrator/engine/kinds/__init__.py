"""Operation kinds: each supplies its steps and how it reads the provider's truth."""
