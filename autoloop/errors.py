"""Typed errors. The core raises these; only the CLI maps them to messages and exit codes."""

from __future__ import annotations


class AutoloopError(Exception):
    """Base of every error autoloop raises on purpose."""

    exit_code = 1


class UsageError(AutoloopError):
    """Bad command line, bad program.md or a repository state we refuse: nothing was changed."""

    exit_code = 2


class ConfigError(UsageError):
    """A problem in program.md; the message is `program.md:LINE: ...`."""


class RepoStateError(UsageError):
    """The repository is in a state autoloop will not work on."""


class LockedError(UsageError):
    """Another run holds the lock for this repository and tag."""


class RunFailure(AutoloopError):
    """The run started but could not go on (baseline failed, fatal generator error, ...)."""

    exit_code = 1


class GeneratorError(AutoloopError):
    """The generator failed this cycle; the cycle becomes `gen_error` and the loop goes on.

    `proposal` (a generators.base.Proposal, when known) carries what the failed attempt still
    cost — tokens and dollars are spent either way — for the ledger to record."""

    def __init__(self, message: str = "", proposal: object | None = None) -> None:
        super().__init__(message)
        self.proposal = proposal


class FatalGeneratorError(RunFailure):
    """The generator can never succeed as configured (bad credentials, missing tool): stop the run."""


class Interrupted(AutoloopError):
    """Ctrl-C or SIGTERM: the current cycle was abandoned and the incumbent restored."""

    exit_code = 130


class NodeLost(AutoloopError):
    """A Ray node (or the worker, the object or the runtime env on it) failed under a
    measurement: the infrastructure's fault, never the candidate's verdict. The measurement
    runs again elsewhere (autoloop.engine.measure)."""

    def __init__(self, message: str, node_id: str | None, host: str | None) -> None:
        super().__init__(message)
        self.node_id, self.host = node_id, host


class ClusterLost(Interrupted):
    """No node can measure any more (every node lost, the cluster gone, the retries spent): the
    run stops as an interruption does (the cycle undone, the journal closed), with its own code."""

    exit_code = 4
