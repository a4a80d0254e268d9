"""User-facing errors: the CLI prints them as one line and exits non-zero, no traceback."""


class RailabError(Exception):
    """An error the user can fix: bad file, bad option, lab state. Message is one line."""

    exit_code = 2


class TopologyError(RailabError):
    """A topology file or generator parameter that cannot form a lab."""


class PlanError(RailabError):
    """A sizing request that cannot be built."""


class RuntimeStateError(RailabError):
    """A lab that is not in the state the command needs (not deployed, not root, ...)."""


class UsageError(RailabError):
    """A command-line option value that cannot be used."""


class WorkloadError(RailabError):
    """A workload file or parameter that cannot produce flows."""
