"""Switching a host on and off from the laptop: the profile's ``power:`` commands (docs/power.md).

``commands`` runs one command and reads its answer; ``wake`` powers a host on before a submit,
resume or move and waits until it answers over SSH.
"""
