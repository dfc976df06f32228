"""A job that exists: status, ls, stop, resume, tail (``ops``), ``pull --follow``, ``rm``/``gc``, tunnel,
status in depth (``watch``), cost and plot."""
