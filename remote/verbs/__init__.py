"""The agent's verbs (``python3 -m remote VERB``), one module per kind: each handler takes the root and
its parsed arguments and returns the verb's document (remote/__main__.py is the table)."""
