"""Exceptions of the learner side. Each names the zenoh key expression involved and what was expected."""

from __future__ import annotations


class StagewiseError(Exception):
    """Base class of every error raised by this package."""


class NoRuntimeError(StagewiseError):
    """No Stagewise runtime answered on a key expression: nothing serves it, or it is not reachable."""

    def __init__(self, key: str, timeout: float, hint: str = ""):
        self.key = key
        self.timeout = timeout
        msg = f"no Stagewise runtime answered on `{key}` within {timeout:g} s"
        super().__init__(msg + (f": {hint}" if hint else ""))


class StepTimeoutError(StagewiseError):
    """A reset or step query got no reply in time (the runtime is there but too slow, or stopped answering).

    The env's state is then unknown: reset before stepping again."""

    def __init__(self, key: str, timeout: float, what: str = "a reply"):
        self.key = key
        self.timeout = timeout
        super().__init__(
            f"`{key}`: expected {what} within {timeout:g} s, got none "
            "(the env may still be running the request: reset before stepping again)"
        )


class WireError(StagewiseError):
    """Bytes on a key expression are not the Stagewise message expected there."""

    def __init__(self, key: str, expected: str, reason: str):
        self.key = key
        self.expected = expected
        super().__init__(f"`{key}`: expected a `{expected}` message: {reason}")


class SchemaError(WireError):
    """A message carries a schema version this client does not read (a newer runtime)."""

    def __init__(self, key: str, expected: str, got: object, supported: int):
        self.got = got
        self.supported = supported
        StagewiseError.__init__(
            self,
            f"`{key}`: `{expected}` message has schema {got!r}; this client reads schema 1..={supported} "
            "(upgrade the `stagewise` Python package to match the runtime)",
        )
        self.key = key
        self.expected = expected


class RemoteError(StagewiseError):
    """The runtime answered, but with an error (the reply's `error` field, or a zenoh error reply)."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"`{key}`: the runtime refused the request: {reason}")


class ServeError(StagewiseError, RuntimeError):
    """A `stagewise serve` this package started exited or never answered (the message quotes its log)."""
