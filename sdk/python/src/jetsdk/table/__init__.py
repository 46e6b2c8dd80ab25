"""Tables: live local views of compacted streams (latest value per key), with per-key
compare-and-set on the server and a local SQLite snapshot (issue 38). See
:class:`jetsdk.table.table.Table`."""

from jetsdk.errors import WrongExpectedKeyOffset
from jetsdk.table.groups import co_partitioned
from jetsdk.table.table import Table
from jetsdk.table.view import Change, Entry, WatchOverflow

__all__ = ["Change", "Entry", "Table", "WatchOverflow", "WrongExpectedKeyOffset", "co_partitioned"]
