"""ctypes binding of the few NCCL calls the weight transport makes, loaded from the `nvidia.nccl` wheel.

What vLLM does (`distributed/device_communicators/pynccl_wrapper.py::NCCLLibrary`): load
`libnccl.so.2` with ctypes and declare each function's argument types. We do the same, for our
own short list, without importing vLLM: `ncclGetVersion`, `ncclGetUniqueId`,
`ncclCommInitRankConfig`, `ncclAllReduce`, `ncclBroadcast`, `ncclCommGetAsyncError`,
`ncclCommAbort`, `ncclCommDestroy`, `ncclGetErrorString`.

Departures from vLLM, on purpose:
- The library is found from the installed NCCL wheel (`nvidia/nccl/lib/libnccl.so.2`, or
  `nvidia/cu<N>/lib/` where CUDA 13 wheels put it), the wheel torch links and
  `docker/nccl_pin.py` pins for both images, else the libnccl this process already mapped
  (torch's CUDA build loads one), not from the loader path; an explicit path can be passed. A missing library is a `NcclLibraryNotFound` that
  names the folders searched and the fix.
- `ncclCommInitRankConfig` with a NON-BLOCKING config replaces vLLM's blocking
  `ncclCommInitRank`, so that every wait can be bounded (poll `ncclCommGetAsyncError`, abort on
  timeout). Blocking or not is a local property of a rank; the wire is the same.
  `NcclConfig` is the NCCL 2.17 prefix of `ncclConfig_t` (size, magic, version, blocking,
  cgaClusterSize, minCTAs, maxCTAs, netName): NCCL copies `min(config.size, sizeof)` bytes and
  takes its own defaults for every later field, so the prefix is valid on NCCL >= 2.17.
This module needs no CUDA and no torch, so its types and its error paths are tested on a CPU.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
from collections.abc import Sequence

NCCL_UNIQUE_ID_BYTES = 128
NCCL_CONFIG_MAGIC = 0xCAFEBEEF
NCCL_CONFIG_UNDEF_INT = -(2**31)  # INT_MIN
NCCL_CONFIG_LAYOUT_VERSION = 21700  # NCCL_VERSION(2, 17, 0): the prefix declared below
LIBRARY_NAME = "libnccl.so.2"

SUCCESS = 0
IN_PROGRESS = 7
RESULT_NAMES = {
    0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
    4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
}
SUM = 0  # ncclRedOp_t ncclSum
# ncclDataType_t by torch dtype name (the names `update_weights` carries); vLLM's ncclDataTypeEnum.
DATA_TYPES = {
    "int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
    "float32": 7, "float64": 8, "bfloat16": 9, "float8_e4m3fn": 10,
}

Comm = ctypes.c_void_p
Stream = ctypes.c_void_p
Buffer = ctypes.c_void_p


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * NCCL_UNIQUE_ID_BYTES)]


class NcclConfig(ctypes.Structure):
    """The NCCL 2.17 prefix of `ncclConfig_t` (see module docstring)."""

    _fields_ = [
        ("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("minCTAs", ctypes.c_int),
        ("maxCTAs", ctypes.c_int), ("netName", ctypes.c_char_p),
    ]


def non_blocking_config() -> NcclConfig:
    """`NCCL_CONFIG_INITIALIZER` for our prefix, with `blocking = 0`."""
    undef = NCCL_CONFIG_UNDEF_INT
    return NcclConfig(
        ctypes.sizeof(NcclConfig), NCCL_CONFIG_MAGIC, NCCL_CONFIG_LAYOUT_VERSION, 0, undef, undef, undef, None
    )


class NcclLibraryNotFound(RuntimeError):
    """libnccl.so.2 could not be located or loaded."""


class NcclError(RuntimeError):
    """An NCCL call returned an error code."""

    def __init__(self, call: str, code: int, message: str) -> None:
        super().__init__(f"{call} failed: {RESULT_NAMES.get(code, 'ncclResult')}({code}): {message}")
        self.call = call
        self.code = code


# name -> (restype, argtypes); every one returns ncclResult_t except ncclGetErrorString.
SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "ncclGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
    "ncclGetVersion": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
    "ncclGetUniqueId": (ctypes.c_int, [ctypes.POINTER(NcclUniqueId)]),
    "ncclCommInitRankConfig": (
        ctypes.c_int, [ctypes.POINTER(Comm), ctypes.c_int, NcclUniqueId, ctypes.c_int, ctypes.POINTER(NcclConfig)]
    ),
    "ncclAllReduce": (
        ctypes.c_int, [Buffer, Buffer, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, Comm, Stream]
    ),
    "ncclBroadcast": (
        ctypes.c_int, [Buffer, Buffer, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, Comm, Stream]
    ),
    "ncclCommGetAsyncError": (ctypes.c_int, [Comm, ctypes.POINTER(ctypes.c_int)]),
    "ncclCommAbort": (ctypes.c_int, [Comm]),
    "ncclCommDestroy": (ctypes.c_int, [Comm]),
}


def package_lib_dirs() -> list[str]:
    """`nvidia/nccl/lib`, then `nvidia/cu<N>/lib` (the CUDA 13 wheels' layout), of the installed wheels."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except ModuleNotFoundError:  # no `nvidia` namespace package at all
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    roots = list(spec.submodule_search_locations)
    dirs = [os.path.join(root, "nccl", "lib") for root in roots]
    for root in roots:
        dirs += sorted(glob.glob(os.path.join(root, "cu[0-9]*", "lib")), reverse=True)
    return [folder for folder in dirs if os.path.isdir(folder)]


def loaded_library(maps_path: str = "/proc/self/maps") -> str | None:
    """The libnccl.so this process already mapped (torch's CUDA build loads one), if any."""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if os.path.basename(path).startswith("libnccl.so") and os.path.isfile(path):
                    return path
    except OSError:
        return None
    return None


def find_library(library_path: str | None = None, search_dirs: Sequence[str] | None = None) -> str:
    """The path of libnccl.so.2: `library_path` if given, else the `nvidia.nccl` wheel's copy."""
    if library_path is not None:
        if not os.path.isfile(library_path):
            raise NcclLibraryNotFound(f"NCCL library_path={library_path!r} does not exist")
        return library_path
    dirs = package_lib_dirs() if search_dirs is None else list(search_dirs)
    for folder in dirs:
        candidate = os.path.join(folder, LIBRARY_NAME)
        if os.path.isfile(candidate):
            return candidate
    if search_dirs is None and (mapped := loaded_library()) is not None:
        return mapped
    where = ", ".join(dirs) if dirs else "no `nvidia.nccl` package is installed in this environment"
    raise NcclLibraryNotFound(
        f"{LIBRARY_NAME} not found (searched: {where}). Install the NCCL wheel the server uses "
        f"(nvidia-nccl-cu12 / nvidia-nccl-cu13, pinned in docker/nccl_pin.py) or pass library_path="
    )


class NcclLibrary:
    """The loaded library, with typed functions and errors that name the call."""

    def __init__(self, library_path: str | None = None) -> None:
        self.path = find_library(library_path)
        try:
            self._lib = ctypes.CDLL(self.path)
        except OSError as error:
            raise NcclLibraryNotFound(f"cannot load NCCL from {self.path}: {error}") from error
        self._fn = {}
        for name, (restype, argtypes) in SIGNATURES.items():
            function = getattr(self._lib, name)
            function.restype, function.argtypes = restype, argtypes
            self._fn[name] = function

    def check(self, call: str, code: int, allow_in_progress: bool = False) -> int:
        if code == SUCCESS or (allow_in_progress and code == IN_PROGRESS):
            return code
        message = self._fn["ncclGetErrorString"](code)
        raise NcclError(call, code, message.decode() if message else "")

    def version(self) -> int:
        value = ctypes.c_int()
        self.check("ncclGetVersion", self._fn["ncclGetVersion"](ctypes.byref(value)))
        return value.value

    def unique_id(self) -> bytes:
        uid = NcclUniqueId()
        self.check("ncclGetUniqueId", self._fn["ncclGetUniqueId"](ctypes.byref(uid)))
        return bytes(uid)

    def comm_init_non_blocking(self, world_size: int, unique_id: bytes, rank: int) -> tuple[int, int]:
        """Starts `ncclCommInitRankConfig(blocking=0)`; returns (comm handle, result code)."""
        if len(unique_id) != NCCL_UNIQUE_ID_BYTES:
            raise ValueError(f"an ncclUniqueId has {NCCL_UNIQUE_ID_BYTES} bytes, got {len(unique_id)}")
        comm, config = Comm(), non_blocking_config()
        uid = NcclUniqueId.from_buffer_copy(unique_id)
        code = self._fn["ncclCommInitRankConfig"](ctypes.byref(comm), world_size, uid, rank, ctypes.byref(config))
        if comm.value is None and code in (SUCCESS, IN_PROGRESS):
            raise NcclError("ncclCommInitRankConfig", 3, "returned no communicator")
        if code not in (SUCCESS, IN_PROGRESS) and comm.value is not None:
            self._fn["ncclCommAbort"](comm)
        self.check("ncclCommInitRankConfig", code, allow_in_progress=True)
        return comm.value, code

    def async_error(self, comm: int) -> int:
        state = ctypes.c_int()
        self.check("ncclCommGetAsyncError", self._fn["ncclCommGetAsyncError"](Comm(comm), ctypes.byref(state)))
        return state.value

    def all_reduce_sum(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        code = self._fn["ncclAllReduce"](Buffer(send), Buffer(recv), count, dtype, SUM, Comm(comm), Stream(stream))
        return self.check("ncclAllReduce", code, allow_in_progress=True)

    def broadcast(self, buffer: int, count: int, dtype: int, root: int, comm: int, stream: int) -> int:
        """In place on the root (send = recv = buffer), as vLLM's `PyNcclCommunicator.broadcast`."""
        code = self._fn["ncclBroadcast"](Buffer(buffer), Buffer(buffer), count, dtype, root, Comm(comm), Stream(stream))
        return self.check("ncclBroadcast", code, allow_in_progress=True)

    def abort(self, comm: int) -> int:
        return self._fn["ncclCommAbort"](Comm(comm))

    def destroy(self, comm: int) -> int:
        return self._fn["ncclCommDestroy"](Comm(comm))
