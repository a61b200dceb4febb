"""Exceptions raised by ccl_core. Each also derives from the builtin a user would catch for it."""


class CclError(RuntimeError):
    """Base of every ccl_core error."""


class InvalidArgumentError(CclError, ValueError):
    """A wrong size, count, rank, root or buffer."""


class UnsupportedError(CclError, NotImplementedError):
    """A dtype or reduce op that ccl_core or oneCCL cannot do."""


class CclTimeoutError(CclError, TimeoutError):
    """Bootstrap or an operation did not finish within its timeout: a peer died or never came."""


class CommunicatorAbortedError(CclError):
    """The communicator was aborted by an earlier timeout or failure."""


class BackendError(CclError):
    """oneCCL reported an error."""
