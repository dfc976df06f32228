"""Files between the laptop and a host: the upload (a plan from the local tree and the laptop's record
of the host, one verified stream, large files over several channels), ``pull`` of checkpoints and logs,
and the newest checkpoint from the mirror with the instance gone."""
