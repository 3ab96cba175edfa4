"""The one family of user errors, and the preemption signal: what the command line turns into exit statuses.

A `McgrpoError` is something the user can fix (a config key, a data file, a stored file from another
version): its message names the key or file and what is allowed, and the CLI prints it without a
traceback. Anything else is a bug and keeps its traceback. Kept free of heavy imports.
"""

import contextlib
import sys


class McgrpoError(Exception):
    """A user error: the message names the key, file or line it concerns and what is allowed."""


class ConfigError(McgrpoError, ValueError):
    """A study config that must not start any job."""


class SchemaError(McgrpoError, ValueError):
    """A stored file that does not hold what its contract says (columns, schema version)."""


class DataError(McgrpoError, ValueError):
    """A data file or results folder that cannot serve the request (missing, malformed, too small)."""


class MissingFile(DataError, FileNotFoundError):
    """A file or folder the request needs is not there (the message names it and what makes it)."""


class CheckpointMismatch(McgrpoError, RuntimeError):
    """A checkpoint written under a different effective config: resuming would mix two runs."""


class Interrupted(Exception):
    """Training stopped on request (a preemption signal) after writing a checkpoint; not an error."""


class UserExit(SystemExit):
    """A user error ending a Snakemake process: its message alone, exit status 2. Snakemake prints its own frames
    around any Exception raised while it reads the Snakefile or its config; SystemExit is none."""

    def __init__(self, error: McgrpoError):
        super().__init__(2)
        self.error = error


@contextlib.contextmanager
def stopping():
    """Inside Snakemake: a McgrpoError raised in the block is printed alone on stderr and ends the process with
    status 2 (`UserExit`); any other exception, a bug, keeps its traceback."""
    try:
        yield
    except McgrpoError as e:
        print(f"Error: {e}", file=sys.stderr)
        raise UserExit(e) from None


class IntegrityError(DataError):
    """A stored run's file that is not what its run wrote: changed after the run finished (sha256), another
    run's (config_hash), unsealed (no manifest) or unreadable (truncated). The message names the file."""


class PluginError(McgrpoError, RuntimeError):
    """A credit rule, selector or verifier plugin that raised or broke its contract at run time (credit that is not
    finite or not one value per token, a selector's groups that are not its choice, tokens generated but not
    reported): the message names the plugin, the rule it served, the iteration and what was wrong
    (mcgrpo.train.contract). The run stops there and is not stored."""
