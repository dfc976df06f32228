"""The package's version, in a module of its own: the foundation reads it without importing the
package's facade (``gpujob/__init__.py`` loads the API on first use, which reaches back down)."""

__version__ = "0.1.0"
