"""Which consumer groups lagd watches: the allow/deny regexes, applied before anything is stored."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lagd.core.config import ClusterSettings


@dataclass(frozen=True)
class GroupFilter:
    """A group is watched when `allow` matches it and `deny` does not (deny wins; "" denies nothing)."""

    allow: str = ".*"
    deny: str = ""
    _allow: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _deny: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    cache: dict[str, bool] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", re.compile(self.allow))
        object.__setattr__(self, "_deny", re.compile(self.deny) if self.deny else None)

    @classmethod
    def for_cluster(cls, cluster: ClusterSettings) -> GroupFilter:
        return cls(cluster.groups_allow, cluster.groups_deny)

    def allows(self, group: str) -> bool:
        """True when the group's events may be emitted (cached: the hot path asks per record)."""
        hit = self.cache.get(group)
        if hit is None:
            hit = self._allow.search(group) is not None and (self._deny is None or self._deny.search(group) is None)
            if len(self.cache) > 100_000:
                self.cache.clear()
            self.cache[group] = hit
        return hit
