"""A host profile and its instance: ``host add``/``set``/``rm``/``trust``/``rekey``, ``exec``/``ssh``,
``doctor`` and the preflight bench."""
