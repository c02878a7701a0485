"""How a run opens its worker and producer sessions (:class:`SessionFactory`), and the refusal of a driver whose wait
would block the whole process (:class:`NotCooperativeError`); both re-exported by :mod:`bench.engines.base`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from bench.errors import RunFailed

if TYPE_CHECKING:
    from bench.engines.base import ProducerSession, WorkerSession


class NotCooperativeError(RunFailed):
    """The driver would block the whole process on a wait; concurrency would be fake."""


class SessionFactory:
    """Opens the sessions of one run: session classes made as ``cls(dsn, cfg, name)``, and
    ``cooperative() -> name`` (RuntimeError when the driver's wait would block)."""

    def __init__(self, dsn: str, cfg: Any, worker: type, producer: type, cooperative: Callable[[], str]):
        self.dsn, self.cfg = dsn, cfg
        self.worker, self.producer, self.cooperative = worker, producer, cooperative

    def worker_session(self, name: str) -> WorkerSession:
        """A new session for worker ``name``. Raises :class:`ConnectFailed`."""
        return self.worker(self.dsn, self.cfg, name)

    def producer_session(self, name: str) -> ProducerSession:
        """A new session for producer ``name``. Raises :class:`ConnectFailed`."""
        return self.producer(self.dsn, self.cfg, name)

    def check_cooperative(self) -> str:
        """The name of the driver's wait function; :class:`NotCooperativeError` if it would block."""
        try:
            return self.cooperative()
        except RuntimeError as err:
            raise NotCooperativeError(str(err)) from None
