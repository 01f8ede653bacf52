"""jailcell: run Python cells in OS-isolated sandboxes.

    from jailcell import Sandbox

    with Sandbox() as sbx:                   # `jailcell serve` at JAILCELL_SOCKET or /run/jailcell/jailcell.sock
        sbx.run_code("x = 41")
        print(sbx.run_code("x + 1").text)    # 42

Sandbox(command=["jailcell", "json"]) speaks to a private `jailcell json`
subprocess instead of the service; AsyncSandbox is the asyncio face of
Sandbox, over asyncio streams (no threads); Client is the service's routes
one to one, returning dicts. The names of E2B's SDK work the same
(commands with their stdin, pty, envs, files.watch_dir, get_info,
set_timeout, get_metrics, Sandbox.connect): README.md lists what differs.
"""

from .aio import AsyncCommandHandle, AsyncCommands, AsyncFiles, AsyncPty, AsyncSandbox, AsyncWatchHandle
from .aio_transport import (AsyncJsonLinesTransport, AsyncSocketTransport, AsyncTCPTransport, AsyncTransport,
                            ThreadedTransport)
from .charts import (BarChart, BoxAndWhiskerChart, Chart, ChartType, HistogramChart, LineChart, PieChart, ScaleType,
                     ScatterChart, SuperChart)
from .client import Client, Session
from .commands import CommandExitException, CommandHandle, CommandResult, Commands, Pty, PtySize
from .errors import (AuthenticationException, BadRequestError, BusyError, ExpiredError, FileNotFoundException,
                     ForbiddenError, InternalError, InvalidArgumentException, JailcellError, LimitError, NotFoundError,
                     NotFoundException, SandboxException, SandboxNotFoundException, UnavailableError)
from .info import SandboxInfo, SandboxMetrics
from .models import Attempt, EntryInfo, Execution, ExecutionError, FileChange, Logs, OutputMessage, Result
from .sandbox import Files, Sandbox
from .transport import DEFAULT_SOCKET, JsonLinesTransport, SocketTransport, Transport
from .watch import FilesystemEvent, FilesystemEventType, WatchHandle

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "AsyncSandbox", "Files", "AsyncFiles", "AsyncCommands", "AsyncCommandHandle", "AsyncWatchHandle",
    "AsyncTransport", "AsyncSocketTransport", "AsyncTCPTransport", "AsyncJsonLinesTransport", "ThreadedTransport",
    "Commands", "CommandResult", "CommandHandle", "CommandExitException", "Pty", "PtySize", "AsyncPty", "SandboxInfo", "SandboxMetrics",
    "FilesystemEvent", "FilesystemEventType", "WatchHandle",
    "Execution", "Result", "Logs", "OutputMessage", "ExecutionError", "FileChange", "EntryInfo", "Attempt",
    "Chart", "ChartType", "ScaleType", "LineChart", "ScatterChart", "BarChart", "PieChart", "HistogramChart",
    "BoxAndWhiskerChart", "SuperChart",
    "Transport", "SocketTransport", "JsonLinesTransport", "DEFAULT_SOCKET",
    "Client", "Session",
    "JailcellError", "BadRequestError", "NotFoundError", "ExpiredError", "LimitError", "BusyError", "UnavailableError",
    "InternalError", "ForbiddenError",
    "SandboxException", "InvalidArgumentException", "NotFoundException", "FileNotFoundException",
    "SandboxNotFoundException", "AuthenticationException",
]
