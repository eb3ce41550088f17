"""Model implementations: stage models and the duplex plugin of each served model."""
