"""The deploy YAML's ``cluster`` section: how many engine replicas, and where.

::

    cluster:
      backend: ray                 # or processes: child processes on this machine
      replicas: 2                  # engine replicas, each a DuplexOmni with its own stages
      resources_per_replica:       # what Ray reserves for one replica (placement)
        num_cpus: 1
        # num_gpus: 1, memory: ..., resources: {accelerator_type: 1}
      max_restarts: 3              # Ray restarts a dead replica this many times
      namespace: omniduplex        # the Ray namespace of the named actors
      startup_timeout_s: 120       # a replica that is not serving by then is an error

With ``backend: processes`` (what ``omniduplex serve --replicas N`` does) only
``replicas`` applies; the Ray keys are ignored.

``max_sessions`` stays in ``duplex_session``: it is per replica, so the cluster admits
``replicas * max_sessions`` sessions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("ray", "processes")
_KEYS = frozenset(
    {
        "backend",
        "replicas",
        "resources_per_replica",
        "max_restarts",
        "namespace",
        "startup_timeout_s",
    }
)
_RESOURCE_KEYS = frozenset({"num_cpus", "num_gpus", "memory", "resources"})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    backend: str = "ray"
    replicas: int = 1
    resources_per_replica: dict[str, Any] = field(default_factory=lambda: {"num_cpus": 1})
    max_restarts: int = 3
    namespace: str = "omniduplex"
    startup_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"cluster.backend must be one of {', '.join(BACKENDS)}")
        if not _is_int(self.replicas) or self.replicas < 1:
            raise ValueError(f"cluster.replicas must be a positive integer, got {self.replicas!r}")
        if not _is_int(self.max_restarts) or self.max_restarts < 0:
            raise ValueError("cluster.max_restarts must be a non-negative integer")
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ValueError("cluster.namespace must be a non-empty string")
        if not isinstance(self.resources_per_replica, Mapping):
            raise ValueError("cluster.resources_per_replica must be a mapping")
        unknown = set(self.resources_per_replica) - _RESOURCE_KEYS
        if unknown:
            raise ValueError(
                f"cluster.resources_per_replica: unknown keys {sorted(unknown)} "
                f"(known: {sorted(_RESOURCE_KEYS)})"
            )
        if not float(self.startup_timeout_s) > 0:
            raise ValueError("cluster.startup_timeout_s must be positive")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> ClusterConfig:
        raw = dict(raw or {})
        unknown = set(raw) - _KEYS
        if unknown:
            raise ValueError(f"cluster: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
        return cls(**raw)

    def replica_name(self, index: int) -> str:
        """The Ray actor name of replica ``index``."""
        return f"replica-{index}"

    @property
    def replica_names(self) -> list[str]:
        return [self.replica_name(i) for i in range(self.replicas)]


#: The Ray actor name of the session directory.
DIRECTORY_NAME = "session-directory"
