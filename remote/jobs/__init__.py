"""Job records: the store, submit and resume, what a job saved, its log's size index, the index, lost jobs, moving jobs, removing them."""
