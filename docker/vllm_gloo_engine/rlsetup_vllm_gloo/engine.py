"""`GlooWeightTransferEngine`: vLLM's dense NCCL weight-transfer engine, re-done over gloo for CPU servers.

Matches vLLM 0.32 `nccl_engine.NCCLWeightTransferEngine` on the wire and in the lifecycle:
- `init_transfer_engine`: join the trainer's group as `rank_offset + dp_index * (TP*PP) + rank`
  (the rank rule of `nccl_common.worker_init_process_group`); record `packed`, the buffer size and
  the buffer count from init_info, so the worker decodes exactly as the trainer encodes.
- `start_weight_update` / `finish_weight_update`: `initialize_layerwise_reload(model)` /
  `finalize_layerwise_reload(model, model_config)`.
- `receive_weights`: packed (vLLM's bucket rule, one uint8 broadcast per bucket) or one broadcast
  per tensor; `model.load_weights` per bucket/tensor inside `disable_mtp_completeness_check()`.
  Packed mode honours `packed_num_buffers` as vLLM's consumer does (there: CUDA streams; here:
  the next bucket's gloo receive is posted before the current one is loaded, `receive.py`).

Departures (all needed on CPU or asked for by the project):
- The group is a `ProcessGroupGloo` on a TCPStore client (`group.py`), not PyNccl; each wait is
  bounded by `RLSETUP_GLOO_TIMEOUT_S` (default 300 s, vLLM's store timeout).
- `update_weights` skips the base class's `torch.accelerator.synchronize()` (no accelerator on
  CPU; gloo's wait already returned when the bytes are in the buffer).
- Receive buffers come from a per-session `BufferPool` (`buffers.py`): a buffer is reused only
  when no view of it is left (vLLM allocates fresh ones; on CPU that costs page faults).
- After finalize, tied parameters are re-tied and their CPU GEMM rebuilt (`ties.py`).
- An `update_info` with all lists empty reuses the previous call's metadata (vLLM 0.33's rule).
- init/update info are validated strictly with errors naming the key (`info.py`).
Subclassing `WeightTransferEngine` is vLLM's plug-in contract, not our own inheritance.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import WeightTransferEngine
from vllm.logger import init_logger
from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

from rlsetup_vllm_gloo.buffers import BufferPool
from rlsetup_vllm_gloo.group import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, join_gloo_group, post_broadcast
from rlsetup_vllm_gloo.info import GlooInitInfo, GlooUpdateInfo, parse_init_info, parse_update_info
from rlsetup_vllm_gloo.receive import receive_packed, receive_unpacked
from rlsetup_vllm_gloo.ties import TiedAlias, find_tied_parameters, retie

logger = init_logger("vllm.rlsetup_gloo")  # under `vllm.` so vLLM's log config applies


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: torch.device, model: torch.nn.Module) -> None:
        super().__init__(config, vllm_config, device, model)
        self._timeout_s = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
        self._group: torch.distributed.ProcessGroupGloo | None = None
        self._init: GlooInitInfo | None = None
        self._last_update: GlooUpdateInfo | None = None
        self._ties: list[TiedAlias] = []
        self._pool: BufferPool | None = None

    def parse_init_info(self, init_dict: dict[str, Any]) -> GlooInitInfo:
        return parse_init_info(init_dict)

    def parse_update_info(self, update_dict: dict[str, Any]) -> GlooUpdateInfo:
        return parse_update_info(update_dict)

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        parallel = self.parallel_config
        rank = init_info.rank_offset + parallel.data_parallel_index * parallel.world_size + parallel.rank
        if rank >= init_info.world_size:
            raise ValueError(f"gloo worker rank {rank} does not fit world_size={init_info.world_size}")
        started = time.monotonic()
        self._group = join_gloo_group(
            init_info.master_address, init_info.master_port, rank, init_info.world_size, self._timeout_s
        )
        self._init = init_info
        logger.info(
            "gloo weight transfer: rank %d/%d joined %s:%d in %.2fs (packed=%s, buffer=%d bytes)",
            rank, init_info.world_size, init_info.master_address, init_info.master_port,
            time.monotonic() - started, init_info.packed, init_info.packed_buffer_size_bytes,
        )

    def start_weight_update(self) -> None:
        self._pool = None
        self._ties = find_tied_parameters(self.model)
        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        self._pool = None  # the receive buffers cost memory only during a sync
        finalize_layerwise_reload(self.model, self.model_config)
        fixed = retie(self._ties)
        if fixed:
            logger.info("gloo weight transfer: re-tied %s", fixed)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # No torch.accelerator.synchronize(): there is no accelerator on a CPU server.
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self._group is None or self._init is None:
            raise RuntimeError("gloo weight transfer not initialized: call /init_weight_transfer_engine first")
        if update_info.is_empty:
            if self._last_update is None:
                raise ValueError("gloo update_info is empty and no previous update_info to reuse")
            update_info = self._last_update
        metas = update_info.metas()
        group, timeout_s, init = self._group, self._timeout_s, self._init

        def post(tensor: torch.Tensor):  # noqa: ANN202 - returns the bounded wait
            return post_broadcast(group, tensor, timeout_s)

        started = time.monotonic()
        with disable_mtp_completeness_check():
            if init.packed:
                if self._pool is None:
                    self._pool = BufferPool(keep=init.packed_num_buffers + 1)
                got = receive_packed(
                    metas, init.packed_buffer_size_bytes, post, self.model.load_weights,
                    num_buffers=init.packed_num_buffers, pool=self._pool,
                )
                received, detail = got.nbytes, (
                    f" ({got.buckets} buckets, {init.packed_num_buffers} buffers: waiting {got.wait_s:.2f}s, "
                    f"loading {got.load_s:.2f}s; buffers reused {self._pool.reused}, allocated {self._pool.allocated})"
                )
            else:
                received, detail = receive_unpacked(metas, post, self.model.load_weights), ""
        self._last_update = update_info
        logger.info(
            "gloo weight transfer: %d tensors, %.1f MB in %.2fs%s",
            len(metas), received / 1e6, time.monotonic() - started, detail,
        )

    def shutdown(self) -> None:
        self._pool = None
        self._group = None
        self._init = None
