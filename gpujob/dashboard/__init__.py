"""``gpujob ui``: a local dashboard in the browser over the Python API (docs/dashboard.md).

hub.py polls (one thread per host, one per open job), logs.py follows an open job's log,
rows.py and compare.py shape the data, app.py serves it (Starlette, the ``ui`` extra, imported
only by ``gpujob ui``), server.py binds 127.0.0.1 and prints the URL with its token; static/
holds the page and the vendored uPlot.
"""
