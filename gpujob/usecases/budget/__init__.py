"""The account's money: limits per day, week and month across every host, and the provider's balance (docs/budget.md)."""
