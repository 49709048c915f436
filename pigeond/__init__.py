"""pigeond: the single writer to opencode for messages between agent sessions."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pigeond")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
