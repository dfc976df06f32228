"""A job started: ``submit`` (its script checked, the upload with the agent's submit started early), the
first host of a list that has the GPUs free (``placement``), and one job over several nodes."""
