"""The stage machinery: models, workers and the batching scheduler they share."""

from .handle import StageHandle, WorkerFactory
from .inprocess import InProcessStageWorker
from .messages import (
    AbortRequest,
    AddRequest,
    StageCounters,
    StageInput,
    StageMetrics,
    StageOutput,
    StageRequestMessage,
    UpdateRequest,
    WorkerDied,
    WorkerEvent,
)
from .model import StageModel
from .scheduler import StageInbox, StageScheduler, run_scheduler_loop
from .spec import StageModelSpec
from .subprocess_worker import SubprocessStageWorker
from .worker import StageWorker, StageWorkerError, WorkerEventCallback

__all__ = [
    "AbortRequest",
    "AddRequest",
    "InProcessStageWorker",
    "StageCounters",
    "StageHandle",
    "StageInbox",
    "StageInput",
    "StageMetrics",
    "StageModel",
    "StageModelSpec",
    "StageOutput",
    "StageRequestMessage",
    "StageScheduler",
    "StageWorker",
    "StageWorkerError",
    "SubprocessStageWorker",
    "UpdateRequest",
    "WorkerDied",
    "WorkerEvent",
    "WorkerEventCallback",
    "WorkerFactory",
    "run_scheduler_loop",
]
