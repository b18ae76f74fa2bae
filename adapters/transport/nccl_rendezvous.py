"""NCCL rendezvous as vLLM's weight-transfer workers expect it, without importing vLLM.

`NcclInitInfo` mirrors vLLM 0.32 `distributed/weight_transfer/nccl_common.py`:
`NCCLWeightTransferInitInfo` and `decode_nccl_unique_id` (exactly one rendezvous mode: either
`master_address` + `master_port`, or `nccl_unique_id_b64`, the STANDARD base64 of the 128 raw
bytes of an `ncclUniqueId`; URL-safe base64 refused), and `worker_init_payload` (the unused
mode's keys are left out of the JSON). Departure: the trainer-side defaults are vLLM's
`NCCLTrainerInitInfo` ones (`packed=True`), and `world_size >= 1`, `rank_offset >= 1`,
`packed_num_buffers >= 1`, `packed_buffer_size_bytes > 0` are checked here, not on the server.

Store protocol (address mode; vLLM `distributed/utils.py::StatelessProcessGroup.create` and
`broadcast_obj`, `device_communicators/pynccl.py::PyNcclCommunicator.__init__`):
- rank 0 hosts a torch `TCPStore` at (master_address, master_port) (`is_master = rank == 0`,
  `use_libuv=False`); workers connect as clients with `world_size` set, store timeout 300 s;
- rank 0 mints the ncclUniqueId and publishes it with `broadcast_obj(unique_id, src=0)`: ONE key,
  `broadcast_from/0/0` (src 0, broadcast counter 0: it is the group's first broadcast), whose
  value is `pickle.dumps` of vLLM's `pynccl_wrapper.ncclUniqueId` ctypes struct (protocol 4:
  `_ctypes._unpickle(<class>, ({}, <128 bytes>))`); each worker `store.get`s it (blocking) and
  unpickles it. `unique_id_pickle` writes those exact bytes without vLLM's class;
  `unique_id_from_pickle` reads them back by walking the opcodes (nothing is executed).
- Departure: our master does not wait for the workers in the store constructor
  (`wait_for_workers=False`): the HTTP call that brings them in runs beside `open`, and NCCL's
  own (bounded) init is the barrier.
"""

from __future__ import annotations

import base64
import binascii
import pickle
import pickletools
import struct
from typing import Any

import attrs

from adapters.transport.nccl_library import NCCL_UNIQUE_ID_BYTES

UNIQUE_ID_KEY = "broadcast_from/0/0"
VLLM_UNIQUE_ID_MODULE = "vllm.distributed.device_communicators.pynccl_wrapper"
VLLM_UNIQUE_ID_CLASS = "ncclUniqueId"
DEFAULT_PACKED_BUFFER_SIZE_BYTES = 1024**3
DEFAULT_PACKED_NUM_BUFFERS = 2


def decode_unique_id_b64(text: str) -> bytes:
    """Standard base64 -> the 128 id bytes; a clear ValueError otherwise."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as error:
        raise ValueError(
            "nccl_unique_id_b64 is not valid standard base64 (URL-safe base64 is not accepted)"
        ) from error
    if len(raw) != NCCL_UNIQUE_ID_BYTES:
        raise ValueError(f"nccl_unique_id_b64 must decode to {NCCL_UNIQUE_ID_BYTES} bytes, got {len(raw)}")
    return raw


def encode_unique_id_b64(raw: bytes) -> str:
    if len(raw) != NCCL_UNIQUE_ID_BYTES:
        raise ValueError(f"an ncclUniqueId has {NCCL_UNIQUE_ID_BYTES} bytes, got {len(raw)}")
    return base64.b64encode(raw).decode("ascii")


def _positive(minimum: int):
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"nccl init_info.{attribute.name} must be an int >= {minimum}, got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class NcclInitInfo:
    """The `init_info` of `/init_weight_transfer_engine` for vLLM's NCCL engine (trainer side)."""

    rank_offset: int = attrs.field(validator=_positive(1))
    world_size: int = attrs.field(validator=_positive(1))
    master_address: str | None = None
    master_port: int | None = None
    nccl_unique_id_b64: str | None = attrs.field(default=None, repr=False)
    packed: bool = True
    packed_buffer_size_bytes: int = attrs.field(default=DEFAULT_PACKED_BUFFER_SIZE_BYTES, validator=_positive(1))
    packed_num_buffers: int = attrs.field(default=DEFAULT_PACKED_NUM_BUFFERS, validator=_positive(1))

    def __attrs_post_init__(self) -> None:
        self.unique_id_bytes()  # validates the rendezvous mode
        if self.master_port is not None and not (
            isinstance(self.master_port, int) and 0 < self.master_port < 65536
        ):
            raise ValueError(f"nccl init_info.master_port must be in 1..65535, got {self.master_port!r}")
        if self.master_address is not None and not (isinstance(self.master_address, str) and self.master_address):
            raise ValueError(f"nccl init_info.master_address must be a non-empty string, got {self.master_address!r}")
        if not isinstance(self.packed, bool):
            raise ValueError(f"nccl init_info.packed must be true or false, got {self.packed!r}")

    @classmethod
    def from_transfer_init(cls, init: Any) -> NcclInitInfo:
        """From the port's `TransferInit` (or any object with its fields, `nccl_unique_id_b64` optional)."""
        return cls(
            rank_offset=init.rank_offset, world_size=init.world_size,
            master_address=init.master_address, master_port=init.master_port,
            nccl_unique_id_b64=getattr(init, "nccl_unique_id_b64", None), packed=init.packed,
            packed_buffer_size_bytes=init.packed_buffer_size_bytes, packed_num_buffers=init.packed_num_buffers,
        )

    @property
    def uses_store(self) -> bool:
        return self.nccl_unique_id_b64 is None

    def unique_id_bytes(self) -> bytes | None:
        """None in address mode; the decoded id in unique-id mode (vLLM `decode_nccl_unique_id`)."""
        has_uid = bool(self.nccl_unique_id_b64)
        has_addr, has_port = self.master_address is not None, self.master_port is not None
        if has_uid and (has_addr or has_port):
            raise ValueError("nccl init_info: pass nccl_unique_id_b64 OR master_address/master_port, not both")
        if not has_uid:
            if not (has_addr and has_port):
                raise ValueError(
                    "nccl init_info: need nccl_unique_id_b64, or both master_address and master_port "
                    f"(got master_address={self.master_address!r}, master_port={self.master_port!r})"
                )
            return None
        return decode_unique_id_b64(self.nccl_unique_id_b64)

    def where(self) -> str:
        return f"{self.master_address}:{self.master_port}" if self.uses_store else "a pre-shared ncclUniqueId"

    def as_init_info(self) -> dict[str, Any]:
        """The JSON payload, without the unused rendezvous keys (vLLM `worker_init_payload`)."""
        return {key: value for key, value in attrs.asdict(self).items() if value is not None}


def _short_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return pickle.SHORT_BINUNICODE + bytes([len(data)]) + data + pickle.MEMOIZE


def unique_id_pickle(raw: bytes) -> bytes:
    """The bytes `pickle.dumps(vllm...pynccl_wrapper.ncclUniqueId)` gives for these 128 id bytes."""
    if len(raw) != NCCL_UNIQUE_ID_BYTES:
        raise ValueError(f"an ncclUniqueId has {NCCL_UNIQUE_ID_BYTES} bytes, got {len(raw)}")
    body = b"".join([
        _short_string("_ctypes"), _short_string("_unpickle"), pickle.STACK_GLOBAL, pickle.MEMOIZE,
        _short_string(VLLM_UNIQUE_ID_MODULE), _short_string(VLLM_UNIQUE_ID_CLASS), pickle.STACK_GLOBAL,
        pickle.MEMOIZE, pickle.EMPTY_DICT, pickle.MEMOIZE, pickle.SHORT_BINBYTES, bytes([len(raw)]), raw,
        pickle.MEMOIZE, pickle.TUPLE2, pickle.MEMOIZE, pickle.TUPLE2, pickle.MEMOIZE, pickle.REDUCE,
        pickle.MEMOIZE, pickle.STOP,
    ])
    return pickle.PROTO + bytes([4]) + pickle.FRAME + struct.pack("<Q", len(body)) + body


def unique_id_from_pickle(data: bytes) -> bytes:
    """The 128 id bytes out of a pickled `ncclUniqueId`, read from the opcodes (never unpickled)."""
    strings: list[str] = []
    blobs: list[bytes] = []
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                strings.append(arg)
            elif opcode.name in ("SHORT_BINBYTES", "BINBYTES"):
                blobs.append(arg)
    except ValueError as error:
        raise ValueError(f"store key {UNIQUE_ID_KEY!r} does not hold a pickle: {error}") from error
    expected = ["_ctypes", "_unpickle", VLLM_UNIQUE_ID_MODULE, VLLM_UNIQUE_ID_CLASS]
    if strings != expected or len(blobs) != 1 or len(blobs[0]) != NCCL_UNIQUE_ID_BYTES:
        raise ValueError(
            f"store key {UNIQUE_ID_KEY!r} is not a pickled {VLLM_UNIQUE_ID_CLASS}: names {strings}, "
            f"byte strings of sizes {[len(b) for b in blobs]}"
        )
    return blobs[0]
