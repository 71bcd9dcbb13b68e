"""One retry policy for every reconnect loop: capped exponential backoff with jitter, and a
steady log cadence.

Jitter: the n-th wait in a row is drawn uniformly from the upper half of `first` x 2^(n-1),
capped at `cap` ("equal jitter"), so a fleet of lagd instances that lost the same broker or
database does not come back in lockstep, while each still backs off. Cadence: the first failure is logged at once, then
one line every `log_every` seconds with the attempt count and how long lagd has been waiting,
so an operator sees what lagd waits for without a line per attempt.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

FIRST_S = 0.5
CAP_S = 30.0
LOG_EVERY_S = 30.0


@dataclass
class Backoff:
    first: float = FIRST_S
    cap: float = CAP_S
    log_every: float = LOG_EVERY_S
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0  # failures since the last success
    _delay: float = 0.0  # the latest wait
    _since: float | None = None
    _logged_at: float | None = None

    def failed(self) -> tuple[float, bool]:
        """Count one failure: the seconds to wait before the next attempt, and whether to log it."""
        now = self.clock()
        self.attempts += 1
        if self._since is None:
            self._since = now
        ceiling = min(self.cap, self.first * 2 ** min(self.attempts - 1, 32))
        self._delay = self.rng.uniform(ceiling / 2, ceiling)
        log_now = self._logged_at is None or now - self._logged_at >= self.log_every
        if log_now:
            self._logged_at = now
        return self._delay, log_now

    @property
    def waiting_s(self) -> float:
        """Seconds since the first failure of this run of failures (0 when none)."""
        return 0.0 if self._since is None else round(self.clock() - self._since, 1)

    def succeeded(self) -> bool:
        """Start over after a success; True when failures had been logged (worth a "recovered" line)."""
        logged = self._logged_at is not None
        self.attempts = 0
        self._delay = 0.0
        self._since = None
        self._logged_at = None
        return logged


def describe_error(exc: BaseException) -> str:
    """ "ClassName: message" once, also for exceptions whose message already starts with their
    class name (aiokafka's do), so logs never read "KafkaConnectionError: KafkaConnectionError: ..."."""
    name = exc.__class__.__name__
    text = str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"
