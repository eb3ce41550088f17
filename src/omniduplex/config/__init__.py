"""Deployment configuration: pipelines, stages and deploy YAML files."""

from .pipeline import (
    DEPLOY_DIR,
    SESSION_MODES,
    WORKER_KINDS,
    PipelineConfig,
    StageConfig,
    load_deploy_config,
    parse_pipeline_config,
    resolve_deploy_path,
)

__all__ = [
    "DEPLOY_DIR",
    "SESSION_MODES",
    "WORKER_KINDS",
    "PipelineConfig",
    "StageConfig",
    "load_deploy_config",
    "parse_pipeline_config",
    "resolve_deploy_path",
]
