"""The single-file client's import name, kept for code written against it:
`from jailcell_client import Client` is jailcell.Client."""

from jailcell.client import DEFAULT_SOCKET, Client, JailcellError, Session

__all__ = ["Client", "Session", "JailcellError", "DEFAULT_SOCKET"]
