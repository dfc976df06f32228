"""The instance side of gpujob: standard library only, Python 3.8+.

Uploaded to ``<root>/agent/<version>/remote`` and run as ``python3 -m remote VERB``.
Every verb prints one JSON document (or a byte stream) so each client action is one round trip.
"""

AGENT_PROTOCOL = 1
