"""NcclTransport on ONE GPU: the library, the id, a world-size-1 group, packed/unpacked sends, timeouts.

A world of one is a real NCCL communicator with no receiver: it proves the ctypes calls, the
warm-up, the bucketing and the stream handling on CUDA tensors, and that the payload is left
intact. The two-process interop is `test_nccl_two_gpu.py` (needs two GPUs).
"""

from __future__ import annotations

import pickle
import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from adapters.transport.gloo_transport import TransportError
from adapters.transport.nccl_comm import NcclCommunicator
from adapters.transport.nccl_library import NCCL_CONFIG_LAYOUT_VERSION, NcclLibrary
from adapters.transport.nccl_rendezvous import UNIQUE_ID_KEY, NcclInitInfo
from adapters.transport.nccl_transport import NcclTransport
from adapters.transport.packed_tensors import spec_of
from application.ports.weight_sync import TransferInit, WeightChunk
from tests.gpu.nccl_receiver import expected_weights, install_vllm_unique_id_class, smollm2_specs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chunk_of(layers: int, seed: int = 0) -> WeightChunk:
    specs = smollm2_specs(layers)
    tensors = expected_weights(seed, specs, "cuda")
    return WeightChunk(tuple(spec_of(s["name"], t) for s, t in zip(specs, tensors)), tensors)


def test_library_loads_with_a_version_our_config_layout_supports_and_mints_ids():
    lib = NcclLibrary()
    assert lib.version() >= NCCL_CONFIG_LAYOUT_VERSION
    ids = {lib.unique_id() for _ in range(2)}
    assert len(ids) == 2 and all(len(i) == 128 for i in ids)
    assert len(NcclTransport(library=lib).mint_unique_id_b64()) == 172


def test_world_of_one_communicator_warms_up_and_broadcast_keeps_the_data():
    lib = NcclLibrary()
    comm = NcclCommunicator.create(lib, lib.unique_id(), 0, 1, torch.cuda.current_device(), timeout=30)
    data = torch.randn(1000, device="cuda").to(torch.bfloat16)
    before = data.clone()
    stream = torch.cuda.current_stream()
    comm.broadcast(data, stream, time.monotonic() + 10, "test broadcast")
    done = torch.cuda.Event()
    done.record(stream)
    comm.wait(done, time.monotonic() + 10, "test broadcast")
    assert torch.equal(data, before)
    comm.destroy()
    assert not comm.is_alive


@pytest.mark.parametrize("num_buffers", [1, 2, 3])
def test_packed_send_in_many_buckets_leaves_the_payload_intact(num_buffers):
    transport = NcclTransport()
    init = NcclInitInfo(
        rank_offset=1, world_size=1, nccl_unique_id_b64=transport.mint_unique_id_b64(),
        packed_buffer_size_bytes=4 * 1024**2, packed_num_buffers=num_buffers,
    )
    transport.open(init, timeout=30)
    chunk = chunk_of(layers=4)
    before = [t.clone() for t in chunk.payload]
    transport.broadcast(chunk, timeout=30)
    assert transport.bytes_sent == sum(s.nbytes for s in chunk.specs)
    assert all(torch.equal(a, b) for a, b in zip(chunk.payload, before))
    transport.close()
    assert not transport.is_open


def test_store_mode_publishes_the_id_under_vllms_key_and_sends_unpacked():
    port = free_port()
    transport = NcclTransport()
    init = TransferInit(master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=1, packed=False)
    transport.open(init, timeout=30)
    client = dist.TCPStore("127.0.0.1", port, 2, is_master=False, timeout=timedelta(seconds=10), use_libuv=False)
    install_vllm_unique_id_class()
    assert len(bytes(pickle.loads(client.get(UNIQUE_ID_KEY)))) == 128
    chunk = chunk_of(layers=1)
    transport.broadcast(chunk, timeout=30)
    assert transport.bytes_sent == sum(s.nbytes for s in chunk.specs)
    transport.close()


def test_a_missing_peer_fails_the_open_within_its_timeout():
    transport = NcclTransport()
    uid = transport.mint_unique_id_b64()
    init = NcclInitInfo(rank_offset=1, world_size=2, nccl_unique_id_b64=uid)
    started = time.monotonic()
    with pytest.raises(TransportError, match="world_size=2"):
        transport.open(init, timeout=5)
    assert time.monotonic() - started < 5 + 12  # timeout + bounded abort
    assert not transport.is_open


def test_payload_on_the_wrong_device_or_shape_is_refused_before_sending():
    transport = NcclTransport()
    transport.open(NcclInitInfo(rank_offset=1, world_size=1, nccl_unique_id_b64=transport.mint_unique_id_b64()), 30)
    chunk = chunk_of(layers=1)
    on_cpu = WeightChunk(chunk.specs, [t.cpu() for t in chunk.payload])
    with pytest.raises(TransportError, match="is on cpu"):
        transport.broadcast(on_cpu, timeout=10)
    assert transport.bytes_sent == 0
    transport.close()



def test_an_abort_event_calls_off_the_open_long_before_its_timeout():
    """The server's init call failed: `SyncWeights` sets the event and the rendezvous stops at once."""
    import threading

    transport = NcclTransport()
    init = NcclInitInfo(rank_offset=1, world_size=2, nccl_unique_id_b64=transport.mint_unique_id_b64())
    abort = threading.Event()
    threading.Timer(1.0, abort.set).start()
    started = time.monotonic()
    with pytest.raises(TransportError):
        transport.open(init, timeout=60, abort=abort)
    assert time.monotonic() - started < 1.0 + 12  # the event, then the bounded communicator abort
    assert not transport.is_open
