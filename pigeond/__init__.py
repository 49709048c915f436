"""pigeond: the single writer to opencode for messages between agent sessions."""

# The one declaration of the version: pyproject.toml reads it from here (setuptools'
# dynamic version), so no command pays for importlib.metadata at start.
__version__ = "0.1.0"
