"""Experiments over the run ledger: record, runs, compare, rerun, sweep (docs/experiments.md)."""
