"""The rows of the PersonaPlex slot table and the counters the stage keeps.

A ``Slot`` is one live conversation: its sampling, its forced prompt, its queue of input
frames and its turn state. ``PersonaPlexStats`` is what tests, benchmarks and the
stage's ``counters()`` (``/metrics``) read.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class PersonaPlexStats:
    """What tests and benchmarks read to check batching."""

    forward_calls: int = 0  # table steps (one batched forward pass each)
    frames_emitted: int = 0
    starved_frames: int = 0  # frames a live session got silence for (client behind)
    dropped_frames: int = 0  # queued frames dropped past ``max_queued_frames``
    stale_frames: int = 0  # queued frames dropped past ``max_input_lag_ms`` of audio
    prompt_frames_dropped: int = 0  # input that arrived while the prompt was fed
    late_frames_dropped: int = 0  # frames whose step had gone ahead with silence
    catchup_ticks: int = 0  # extra steps for sessions over ``max_backlog_frames``
    deadline_ticks: int = 0  # steps that fed silence to a session whose frame was late
    # Input frame arrival -> the start of the step that took it (stage clock).
    input_frames: int = 0
    input_wait_s_sum: float = 0.0
    input_wait_s_max: float = 0.0
    last_input_wait_s: float = 0.0
    last_batch_size: int = 0  # live slots in the last step
    max_batch_size: int = 0
    batch_sizes: Counter[int] = field(default_factory=Counter)
    last_step_s: float = 0.0
    step_s_sum: float = 0.0  # every step's duration, added up (stage clock)


@dataclass(slots=True)
class Frame:
    samples: np.ndarray
    arrived_at: float  # stage clock


@dataclass(slots=True)
class Slot:
    index: int
    session_id: str
    request_id: str
    epoch: int
    seed: int
    temp: float
    temp_text: float
    top_k: int
    top_k_text: int
    prompt_text: list[int]
    prompt_audio: np.ndarray  # [8, P] agent codes forced during the prompt (delays applied)
    queue: deque[Frame] = field(default_factory=deque)
    steps: int = 0
    fresh: bool = True  # reset its streaming rows before its first step
    speaking: bool = False
    quiet: int = 0
    muted: bool = False
    # A step fed it silence in place of a frame that had not come: that frame, when it
    # comes, is dropped, so its steps keep real time (at most one is owed).
    silence_owed: bool = False

    @property
    def prompt_frames(self) -> int:
        return len(self.prompt_text)

    @property
    def prompting(self) -> bool:
        return self.steps < self.prompt_frames

    @property
    def ready(self) -> bool:
        return self.prompting or bool(self.queue)

    @property
    def backlog(self) -> int:
        return len(self.queue)
