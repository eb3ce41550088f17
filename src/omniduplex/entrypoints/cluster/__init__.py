"""More than one engine: replicas behind front ends, on Ray (``ray_backend``, more than one
machine) or as child processes of one front door (``processes``, every core of one).

``ray_backend`` imports Ray; nothing else here does, so the single-process server never
loads it.
"""

from .config import DIRECTORY_NAME, ClusterConfig
from .directory import ClusterView, Placement, ReplicaView, SessionDirectory
from .frontend import REPLICA_FAILED, ClusterRoute, ReplicaBackend, ReplicaUnavailable

__all__ = [
    "DIRECTORY_NAME",
    "REPLICA_FAILED",
    "ClusterConfig",
    "ClusterRoute",
    "ClusterView",
    "Placement",
    "ReplicaBackend",
    "ReplicaUnavailable",
    "ReplicaView",
    "SessionDirectory",
]
