"""The run ledger: every job this laptop submitted, kept in SQLite after the host forgot it (docs/experiments.md)."""

from gpujob.config.ledger.store import Ledger, LedgerDamaged, ledger_path, open_ledger

__all__ = ["Ledger", "LedgerDamaged", "ledger_path", "open_ledger"]
