"""The elastic quota tree and its admission engine. Pure and deterministic."""
