"""A session that names a voice the deployment does not have made a client mistake: the
refusal is ``invalid_request_error``, not ``server_error`` (personaplex's voice codes were
missing from the error table, so an unknown code was classed as the server's fault)."""

from __future__ import annotations

import pytest

from omniduplex.engine.duplex.plugin import DuplexRuntimeConfigError
from omniduplex.model_executor.models.personaplex.plugin import PersonaPlexDuplexPlugin
from omniduplex.protocol.duplex.errors import error_class_for


@pytest.mark.parametrize("voice", ["nobody", "voices/NATF2.pt"])
def test_personaplex_voice_refusals_are_the_clients_fault(voice: str) -> None:
    with pytest.raises(DuplexRuntimeConfigError) as refused:
        PersonaPlexDuplexPlugin({"model": "tiny"}).validate_session_config({"voice": voice})
    assert refused.value.code in ("invalid_voice", "unsupported_voice")
    assert error_class_for(refused.value.code) == "invalid_request_error"
