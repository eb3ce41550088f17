"""Pipeline and stage configuration, and loading it from a deploy YAML file.

A deploy file describes one deployment::

    name: echo                     # pipeline name
    served_model_name: echo-1      # what /v1/models reports (default: name)
    session_mode: turn             # "turn" or "duplex"
    duplex_plugin: null            # "package.module:Plugin" for a duplex-capable model
    duplex_session: {}             # runtime settings, passed through untouched
    mcp: {}                        # remote MCP tools: allowed_urls, timeouts, caps
    cluster: {}                    # engine replicas on Ray (entrypoints/cluster), untouched here
    max_requests: 64               # requests outside sessions in flight at once
    base_config: other.yaml        # optional: start from another file and override it
    stages:
      - name: upper
        worker: thread             # "thread" (in-process) or "process" (subprocess)
        max_batch: 8               # most requests one step advances together
        max_restarts: 3            # worker replacements before the stage is given up
        model:
          factory: package.module:Model
          kwargs: {chunk_size: 4}

Every problem is reported as a ``ValueError`` that names the file and the key; an unknown
key also names the nearest known one (``unknown key 'sesion_mode' (did you mean
'session_mode'?)``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..engine.stage.spec import StageModelSpec

if TYPE_CHECKING:
    from ..engine.duplex.mcp.config import McpConfig

WORKER_KINDS = ("thread", "process")
SESSION_MODES = ("turn", "duplex")
DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy"

_PIPELINE_KEYS = frozenset(
    {
        "name",
        "served_model_name",
        "session_mode",
        "duplex_plugin",
        "duplex_session",
        "mcp",
        "cluster",
        "max_requests",
        "stages",
        "base_config",
    }
)
_STAGE_KEYS = frozenset({"name", "model", "worker", "max_batch", "max_restarts"})
_MODEL_KEYS = frozenset({"factory", "kwargs"})


def _mcp_config(raw: Mapping[str, Any] | None = None) -> McpConfig:
    # Imported here: the turn-based stack imports this module and no duplex module
    # (tests/engine/test_import_boundary_turn.py); the mcp config module is light.
    from ..engine.duplex.mcp.config import McpConfig

    return McpConfig.from_mapping(raw)


def _is_int(value: object) -> bool:
    # bool is an int subclass; ``max_batch: yes`` is a typo, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class StageConfig:
    name: str
    model: StageModelSpec
    worker: str = "thread"
    max_batch: int = 8
    max_restarts: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"stage name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.model, StageModelSpec):
            raise ValueError(f"stage {self.name!r}: model must be a StageModelSpec")
        if self.worker not in WORKER_KINDS:
            raise ValueError(
                f"stage {self.name!r}: worker must be one of {', '.join(WORKER_KINDS)}, "
                f"got {self.worker!r}"
            )
        if not _is_int(self.max_batch) or self.max_batch < 1:
            raise ValueError(
                f"stage {self.name!r}: max_batch must be a positive integer, got {self.max_batch!r}"
            )
        if not _is_int(self.max_restarts) or self.max_restarts < 0:
            raise ValueError(
                f"stage {self.name!r}: max_restarts must be a non-negative integer, "
                f"got {self.max_restarts!r}"
            )


@dataclass(frozen=True)
class PipelineConfig:
    """A pipeline of stages plus the deployment settings the serving layer reads.

    ``session_mode`` defaults to ``"turn"``; a pipeline that declares ``duplex_plugin``
    must say which mode it is deployed in, so a forgotten key cannot silently change
    what the server exposes. ``duplex_session`` is not interpreted here.

    ``max_requests`` bounds the requests outside any session that may be in flight at
    once (``generate``, stage tasks such as a transcription, turn responses such as a
    chat completion); one more is refused at once (``EngineBusyError``), so a burst of
    HTTP calls cannot queue without end behind the sessions' work.

    ``mcp`` is what the deployment allows sessions' remote MCP tools (which URLs, how
    long, how much); see ``engine/duplex/mcp/config.py``.
    """

    name: str
    stages: tuple[StageConfig, ...]
    duplex_plugin: str | None = None
    session_mode: str | None = None
    duplex_session: dict[str, Any] = field(default_factory=dict)
    served_model_name: str | None = None
    max_requests: int = 64
    mcp: McpConfig = field(default_factory=_mcp_config)
    # How the deployment runs on more than one machine (``omniduplex serve --ray``); read
    # by ``entrypoints.cluster.ClusterConfig``, not here.
    cluster: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"pipeline name must be a non-empty string, got {self.name!r}")
        if isinstance(self.stages, str | bytes) or not isinstance(self.stages, Sequence):
            raise ValueError(f"pipeline {self.name!r}: stages must be a list of stages")
        stages = tuple(self.stages)
        if not stages:
            raise ValueError(f"pipeline {self.name!r}: needs at least one stage")
        for stage in stages:
            if not isinstance(stage, StageConfig):
                raise ValueError(f"pipeline {self.name!r}: stages must be StageConfig objects")
        seen: set[str] = set()
        for stage in stages:
            if stage.name in seen:
                raise ValueError(f"pipeline {self.name!r}: duplicate stage name {stage.name!r}")
            seen.add(stage.name)
        object.__setattr__(self, "stages", stages)

        if self.duplex_plugin is not None and (
            not isinstance(self.duplex_plugin, str) or not self.duplex_plugin
        ):
            raise ValueError(
                f"pipeline {self.name!r}: duplex_plugin must be a non-empty string or null, "
                f"got {self.duplex_plugin!r}"
            )
        mode = self.session_mode
        if mode is None:
            if self.duplex_plugin is not None:
                raise ValueError(
                    f"pipeline {self.name!r} declares duplex_plugin, so it must set "
                    "session_mode: turn or duplex"
                )
            mode = "turn"
        if mode not in SESSION_MODES:
            raise ValueError(
                f"pipeline {self.name!r}: session_mode must be turn or duplex, got {mode!r}"
            )
        if mode == "duplex" and self.duplex_plugin is None:
            raise ValueError(f"pipeline {self.name!r}: session_mode: duplex needs a duplex_plugin")
        object.__setattr__(self, "session_mode", mode)

        session = {} if self.duplex_session is None else self.duplex_session
        if not isinstance(session, Mapping):
            raise ValueError(
                f"pipeline {self.name!r}: duplex_session must be a mapping, got {session!r}"
            )
        object.__setattr__(self, "duplex_session", dict(session))
        cluster = {} if self.cluster is None else self.cluster
        if not isinstance(cluster, Mapping):
            raise ValueError(f"pipeline {self.name!r}: cluster must be a mapping, got {cluster!r}")
        object.__setattr__(self, "cluster", dict(cluster))
        from ..engine.duplex.mcp.config import McpConfig

        if not isinstance(self.mcp, McpConfig):
            raise ValueError(f"pipeline {self.name!r}: mcp must be an McpConfig")

        served = self.name if self.served_model_name is None else self.served_model_name
        if not isinstance(served, str) or not served:
            raise ValueError(
                f"pipeline {self.name!r}: served_model_name must be a non-empty string, "
                f"got {served!r}"
            )
        object.__setattr__(self, "served_model_name", served)
        if not _is_int(self.max_requests) or self.max_requests < 1:
            raise ValueError(
                f"pipeline {self.name!r}: max_requests must be a positive integer, "
                f"got {self.max_requests!r}"
            )

    @property
    def final_stage_index(self) -> int:
        return len(self.stages) - 1


# ---- parsing ----------------------------------------------------------------------------


def unknown_key_message(key: str, known: Iterable[str]) -> str:
    """``unknown key 'sesion_mode' (did you mean 'session_mode'?)``: a typo names its fix."""
    nearest = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
    return f"unknown key {key!r}{hint}"


def _check_keys(raw: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in allowed)
    if unknown:
        named = "; ".join(unknown_key_message(key, allowed) for key in unknown)
        raise ValueError(f"{where}: {named}; the known keys are {', '.join(sorted(allowed))}")


def _parse_model(raw: object, where: str) -> StageModelSpec:
    if isinstance(raw, str):
        raw = {"factory": raw}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a mapping with factory and kwargs, got {raw!r}")
    _check_keys(raw, _MODEL_KEYS, where)
    if "factory" not in raw:
        raise ValueError(f"{where}.factory: missing (a package.module:Class that builds the model)")
    kwargs = raw.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"{where}.kwargs: must be a mapping, got {kwargs!r}")
    try:
        return StageModelSpec(factory=raw["factory"], kwargs=dict(kwargs))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _parse_stage(raw: object, where: str) -> StageConfig:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a mapping, got {raw!r}")
    _check_keys(raw, _STAGE_KEYS, where)
    for key in ("name", "model"):
        if key not in raw:
            raise ValueError(f"{where}.{key}: missing (every stage needs a name and a model)")
    options = {key: raw[key] for key in ("worker", "max_batch", "max_restarts") if key in raw}
    try:
        return StageConfig(
            name=raw["name"], model=_parse_model(raw["model"], f"{where}.model"), **options
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def parse_pipeline_config(raw: Mapping[str, Any], *, source: str = "<mapping>") -> PipelineConfig:
    """Build a ``PipelineConfig`` from an already loaded mapping (``base_config`` resolved)."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: a deploy config must be a mapping, got {type(raw).__name__}")
    _check_keys(raw, _PIPELINE_KEYS, source)
    if "name" not in raw:
        raise ValueError(f"{source}: name: missing (the deployment's name)")
    stages_raw = raw.get("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ValueError(f"{source}: stages must be a non-empty list, got {stages_raw!r}")
    stages = tuple(
        _parse_stage(stage, f"{source}: stages[{i}]") for i, stage in enumerate(stages_raw)
    )
    try:
        return PipelineConfig(
            name=raw["name"],
            stages=stages,
            duplex_plugin=raw.get("duplex_plugin"),
            session_mode=raw.get("session_mode"),
            duplex_session=raw.get("duplex_session") or {},
            served_model_name=raw.get("served_model_name"),
            cluster=raw.get("cluster") or {},
            mcp=_mcp_config(raw.get("mcp")),
            **({"max_requests": raw["max_requests"]} if "max_requests" in raw else {}),
        )
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


# ---- files ------------------------------------------------------------------------------


def resolve_deploy_path(
    path_or_name: str | os.PathLike[str], *, deploy_dir: Path | None = None
) -> Path:
    """A file path as given, or a bare name looked up in the shipped deploy folder."""
    candidate = Path(path_or_name)
    if candidate.is_file():
        return candidate
    folder = DEPLOY_DIR if deploy_dir is None else deploy_dir
    text = os.fspath(path_or_name)
    if os.sep not in text and (os.altsep is None or os.altsep not in text):
        for name in (text, f"{text}.yaml", f"{text}.yml"):
            if (folder / name).is_file():
                return folder / name
    known = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
    raise FileNotFoundError(
        f"deploy config {text!r} not found (as a path, or in {folder}; "
        f"known names: {', '.join(known) or 'none'})"
    )


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    # Mappings merge key by key (so a profile can change one duplex_session knob);
    # anything else, including the stage list, is replaced whole.
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_yaml(path: Path, deploy_dir: Path | None, chain: tuple[Path, ...]) -> dict[str, Any]:
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(str(p) for p in (*chain, resolved))
        raise ValueError(f"deploy config base_config cycle: {cycle}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a deploy config must be a mapping, got {type(raw).__name__}")
    base_ref = raw.pop("base_config", None)
    if base_ref is None:
        return raw
    if not isinstance(base_ref, str) or not base_ref:
        raise ValueError(f"{path}: base_config must be a file name, got {base_ref!r}")
    sibling = path.parent / base_ref
    base_path = (
        sibling if sibling.is_file() else resolve_deploy_path(base_ref, deploy_dir=deploy_dir)
    )
    return _merge(_read_yaml(base_path, deploy_dir, (*chain, resolved)), raw)


def load_deploy_config(
    path_or_name: str | os.PathLike[str], *, deploy_dir: Path | None = None
) -> PipelineConfig:
    """Load a deploy YAML file (a path, or a name in ``omniduplex/deploy/``).

    A duplex deployment's ``duplex_session`` keys are checked here too, so a misspelt one
    is named, with the nearest known key, before anything starts (the engine would refuse
    it only once its startup began)."""
    path = resolve_deploy_path(path_or_name, deploy_dir=deploy_dir)
    config = parse_pipeline_config(_read_yaml(path, deploy_dir, ()), source=str(path))
    if config.session_mode == "duplex":
        _check_duplex_session_keys(config.duplex_session, str(path))
    return config


def _check_duplex_session_keys(session: Mapping[str, Any], source: str) -> None:
    from ..engine.duplex.runtime_config import DuplexSessionRuntimeConfig

    known = {f.name for f in fields(DuplexSessionRuntimeConfig)}
    named = [unknown_key_message(str(key), known) for key in sorted(session) if key not in known]
    if not named:
        return
    if not all("did you mean" in message for message in named):
        named.append(f"the known keys are {', '.join(sorted(known))}")
    raise ValueError(f"{source}: duplex_session: {'; '.join(named)}")
