"""A job's files: the code hash, the content-addressed data store, trees moved in one round trip."""
