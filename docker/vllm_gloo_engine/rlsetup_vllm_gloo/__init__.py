"""vLLM general plugin: registers the `gloo` weight-transfer engine.

Installed into the vLLM server's environment (`pip install -e docker/vllm_gloo_engine`); vLLM calls
`register()` in every process through the `vllm.general_plugins` entry point. After that,
`--weight-transfer-config '{"backend": "gloo"}'` selects `GlooWeightTransferEngine` and vLLM's own
RL routes (`/init_weight_transfer_engine`, `/start_weight_update`, `/update_weights`,
`/finish_weight_update`, ...) drive it unchanged.

Importing this package imports neither vllm nor torch (registration is lazy, by module path), so
`rlsetup_vllm_gloo.receive` can be used by tests in an environment without vLLM.
"""

from __future__ import annotations

BACKEND_NAME = "gloo"
_ENGINE_MODULE = "rlsetup_vllm_gloo.engine"
_ENGINE_CLASS = "GlooWeightTransferEngine"


def register() -> None:
    """Register the engine with vLLM's factory; safe to call more than once per process."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    try:
        WeightTransferEngineFactory.register_engine(BACKEND_NAME, _ENGINE_MODULE, _ENGINE_CLASS)
    except ValueError as error:
        if "already registered" not in str(error):
            raise
