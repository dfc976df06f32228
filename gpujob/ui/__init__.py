"""Rendering: everything drawn for a person (rich) or printed as JSON. Use cases return data; this draws it."""
