"""Pools of instances made on demand through the provider's commands (docs/pools.md)."""
