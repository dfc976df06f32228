"""Job records: the store, the index, lost jobs, moving jobs, removing them."""
