"""Notifications sent from the laptop: ``gpujob notify test``, and the events only the laptop sees
(a lost job, a sweep's end) through the agent's own channel code."""
