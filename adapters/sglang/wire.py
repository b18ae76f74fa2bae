"""Names both ends of SGLang's weight-update group must agree on (SGLang 0.5.23 `managers/io_struct.py`)."""

from __future__ import annotations

DEFAULT_GROUP_NAME = "weight_update_group"  # `InitWeightsUpdateGroupReqInput.group_name` default
BACKENDS = ("gloo", "nccl")  # torch c10d backends SGLang's `init_custom_process_group` is given
LOAD_FORMAT = "flattened_bucket"  # one uint8 buffer per `/update_weights_from_distributed` call
