"""What a CPU can check of the NCCL transport: init_info rules, ctypes layouts, the store protocol,
bucket planning (sender and receiver double agree), and a clear error when NCCL is missing.

The CUDA paths are in tests/gpu/ (skipped without a GPU).
"""

from __future__ import annotations

import base64
import ctypes
import pickle
import socket
import sys
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from adapters.transport.gloo_transport import TransportError
from adapters.transport.nccl_comm import nccl_dtype
from adapters.transport.nccl_library import (
    DATA_TYPES, SIGNATURES, NcclConfig, NcclLibrary, NcclLibraryNotFound, NcclUniqueId, find_library,
    non_blocking_config,
)
from adapters.transport.nccl_rendezvous import (
    UNIQUE_ID_KEY, NcclInitInfo, unique_id_from_pickle, unique_id_pickle,
)
from adapters.transport.nccl_transport import NcclTransport
from adapters.transport.packed_tensors import packed_buckets, spec_of
from application.ports.weight_sync import TransferInit, WeightChunk
from tests.gpu.nccl_receiver import (
    expected_weights, install_vllm_unique_id_class, receive_plan, smollm2_specs, unpack,
)

ID = bytes((i * 7) % 256 for i in range(128))
# pickle.dumps(vllm...pynccl_wrapper.ncclUniqueId with internal = ID), captured once from vLLM 0.32
# (.venv-vllm) so the test pins the exact wire bytes a vLLM worker unpickles.
VLLM_PICKLE = bytes.fromhex(
    "800495ec000000000000008c075f637479706573948c095f756e7069636b6c659493948c34766c6c6d2e64697374"
    "726962757465642e6465766963655f636f6d6d756e696361746f72732e70796e63636c5f77726170706572948c0c"
    "6e63636c556e6971756549649493947d94438000070e151c232a31383f464d545b626970777e858c939aa1a8afb6"
    "bdc4cbd2d9e0e7eef5fc030a11181f262d343b424950575e656c737a81888f969da4abb2b9c0c7ced5dce3eaf1f8"
    "ff060d141b222930373e454c535a61686f767d848b9299a0a7aeb5bcc3cad1d8dfe6edf4fb020910171e252c333a"
    "41484f565d646b7279948694869452942e"
)


class FakeNcclLibrary:
    """Mints ids like ncclGetUniqueId would; the store protocol needs nothing else."""

    def __init__(self) -> None:
        self.minted: list[bytes] = []

    def unique_id(self) -> bytes:
        self.minted.append(bytes((len(self.minted) + i) % 256 for i in range(128)))
        return self.minted[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- init_info -------------------------------------------------------------------------------


def test_address_mode_payload_leaves_out_the_unused_id_and_keeps_the_trainer_defaults():
    info = NcclInitInfo(master_address="10.0.0.1", master_port=51216, rank_offset=1, world_size=3)
    assert info.as_init_info() == {
        "rank_offset": 1, "world_size": 3, "master_address": "10.0.0.1", "master_port": 51216,
        "packed": True, "packed_buffer_size_bytes": 1024**3, "packed_num_buffers": 2,
    }
    assert info.unique_id_bytes() is None and info.uses_store


def test_unique_id_mode_payload_has_no_address_and_decodes_to_the_id():
    uid = base64.b64encode(ID).decode()
    info = NcclInitInfo(nccl_unique_id_b64=uid, rank_offset=1, world_size=2)
    assert "master_address" not in info.as_init_info() and info.as_init_info()["nccl_unique_id_b64"] == uid
    assert info.unique_id_bytes() == ID and not info.uses_store
    assert uid not in repr(info)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(master_address="h", master_port=1, nccl_unique_id_b64=base64.b64encode(ID).decode()), "not both"),
        (dict(master_port=1, nccl_unique_id_b64=base64.b64encode(ID).decode()), "not both"),
        (dict(), "need nccl_unique_id_b64, or both"),
        (dict(master_address="h"), "master_port=None"),
        (dict(nccl_unique_id_b64=base64.urlsafe_b64encode(bytes([251] * 128)).decode()), "URL-safe"),
        (dict(nccl_unique_id_b64=base64.b64encode(ID[:64]).decode()), "128 bytes, got 64"),
        (dict(master_address="h", master_port=70000), "master_port must be in 1..65535"),
        (dict(master_address="", master_port=5), "non-empty"),
        (dict(master_address="h", master_port=5, world_size=0), "world_size must be an int >= 1"),
        (dict(master_address="h", master_port=5, packed_num_buffers=0), "packed_num_buffers"),
        (dict(master_address="h", master_port=5, packed_buffer_size_bytes=0), "packed_buffer_size_bytes"),
    ],
)
def test_bad_init_info_is_refused_naming_the_field(fields, message):
    options = dict(rank_offset=1, world_size=2) | fields
    with pytest.raises(ValueError, match=message):
        NcclInitInfo(**options)


def test_from_the_ports_transfer_init():
    init = TransferInit(master_address="127.0.0.1", master_port=5000, rank_offset=1, world_size=2, packed=False,
                        packed_buffer_size_bytes=4096, packed_num_buffers=3)
    info = NcclInitInfo.from_transfer_init(init)
    assert info.as_init_info() == init.as_init_info()


# ---- ctypes ----------------------------------------------------------------------------------


def test_ctypes_layouts_match_nccl_h():
    assert ctypes.sizeof(NcclUniqueId) == 128
    assert ctypes.sizeof(NcclConfig) == 40 and NcclConfig.blocking.offset == 16 and NcclConfig.netName.offset == 32
    config = non_blocking_config()
    assert (config.size, config.magic, config.version, config.blocking) == (40, 0xCAFEBEEF, 21700, 0)
    assert config.cgaClusterSize == config.minCTAs == config.maxCTAs == -(2**31) and config.netName is None


def test_ctypes_signatures_follow_nccl_h():
    assert len(SIGNATURES["ncclBroadcast"][1]) == 7 and len(SIGNATURES["ncclAllReduce"][1]) == 7
    init_args = SIGNATURES["ncclCommInitRankConfig"][1]
    assert init_args[2] is NcclUniqueId and len(init_args) == 5  # the id travels by value
    assert SIGNATURES["ncclGetErrorString"][0] is ctypes.c_char_p


def test_data_types_are_ncclDataType_t():
    assert (DATA_TYPES["uint8"], DATA_TYPES["float32"], DATA_TYPES["bfloat16"]) == (1, 7, 9)
    assert nccl_dtype(torch.bfloat16) == 9
    with pytest.raises(ValueError, match="cannot broadcast dtype bool"):
        nccl_dtype(torch.bool)


# ---- the library ------------------------------------------------------------------------------


def test_missing_library_says_where_it_looked_and_what_to_install(tmp_path):
    with pytest.raises(NcclLibraryNotFound, match=rf"searched: {tmp_path}.*nvidia-nccl-cu13"):
        find_library(search_dirs=[str(tmp_path)])
    with pytest.raises(NcclLibraryNotFound, match="no `nvidia.nccl` package"):
        find_library(search_dirs=[])
    with pytest.raises(NcclLibraryNotFound, match="library_path='/nope/libnccl.so.2' does not exist"):
        find_library("/nope/libnccl.so.2")


def test_a_file_that_is_not_a_library_is_a_clear_load_error(tmp_path):
    fake = tmp_path / "libnccl.so.2"
    fake.write_text("not an ELF")
    assert find_library(search_dirs=[str(tmp_path)]) == str(fake)
    with pytest.raises(NcclLibraryNotFound, match="cannot load NCCL from"):
        NcclLibrary(str(fake))


# ---- the store protocol ------------------------------------------------------------------------


def test_unique_id_pickle_is_byte_identical_to_vllms():
    assert unique_id_pickle(ID) == VLLM_PICKLE
    assert unique_id_from_pickle(VLLM_PICKLE) == ID


def test_a_vllm_worker_unpickles_our_bytes_into_its_ncclUniqueId(monkeypatch):
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    install_vllm_unique_id_class()
    try:
        got = pickle.loads(unique_id_pickle(ID))
        assert type(got).__name__ == "ncclUniqueId" and bytes(got.internal) == ID
    finally:
        for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
            del sys.modules[name]


def test_other_pickles_are_not_taken_for_an_id():
    with pytest.raises(ValueError, match="not a pickled ncclUniqueId"):
        unique_id_from_pickle(pickle.dumps(ID))
    with pytest.raises(ValueError, match="does not hold a pickle"):
        unique_id_from_pickle(b"garbage")


def test_rank0_hosts_the_store_and_a_worker_client_reads_the_id_under_vllms_key():
    port = free_port()
    fake = FakeNcclLibrary()
    transport = NcclTransport(library=fake)
    info = NcclInitInfo(master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=2)
    assert transport._host_store(info, timeout=10) == fake.minted[0]
    # What StatelessProcessGroup.create + broadcast_obj(None, src=0) do on a worker rank:
    client = dist.TCPStore(host_name="127.0.0.1", port=port, world_size=2, is_master=False,
                           timeout=timedelta(seconds=10), use_libuv=False)
    assert unique_id_from_pickle(client.get(UNIQUE_ID_KEY)) == fake.minted[0]
    transport.close()


def test_a_taken_port_is_a_transport_error_naming_it():
    fake = FakeNcclLibrary()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        init = TransferInit(master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=2)
        with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
            NcclTransport(library=fake, device=0).open(init, timeout=3)


def test_broadcast_before_open_is_refused():
    chunk = WeightChunk((spec_of("w", torch.zeros(2)),), [torch.zeros(2)])
    with pytest.raises(TransportError, match="not open"):
        NcclTransport(library=FakeNcclLibrary()).broadcast(chunk, timeout=1)


# ---- bucket planning (CUDA-free tensors) ----------------------------------------------------------


@pytest.mark.parametrize("buffer", [1, 300_000, 2 * 1024**2, 1024**3])
def test_sender_buckets_and_the_receivers_recomputed_plan_agree_bit_for_bit(buffer):
    specs = smollm2_specs(layers=2)
    specs[0] = dict(specs[0], shape=[4096, 576])  # a smaller embedding keeps the CPU test fast
    tensors = expected_weights(3, specs)
    chunk_specs = tuple(spec_of(s["name"], t) for s, t in zip(specs, tensors))
    sent = list(packed_buckets(chunk_specs, tensors, buffer))
    plan = receive_plan(specs, buffer)
    assert [b.numel() for b in sent] == [sum(chunk_specs[i].nbytes for i in bucket) for bucket in plan]
    received = [t for buffer_, bucket in zip(sent, plan) for t in unpack(buffer_, [specs[i] for i in bucket])]
    assert len(received) == len(tensors)
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(received, tensors))
    if buffer == 1:
        assert len(sent) == len(specs)  # every tensor crosses a 1-byte buffer: one per bucket
