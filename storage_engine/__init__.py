"""Spindle's storage engine: Z-set batches, LSM spines, checkpoints. See README.md."""

from .batch import Batch
from .commit import CommitHandle
from .errors import (
    CheckpointNotFoundError,
    CommitFailedError,
    CorruptionError,
    FingerprintMismatchError,
    FormatVersionError,
    LockedError,
    ManifestMissingError,
    SchemaMismatchError,
    StorageError,
)
from .file_format import BatchFile, WriteOptions
from .fileio import FileLayer, PosixFileLayer
from .location import SpineMeta, StorageLocation
from .location_gc import GcResult
from .manifest import CheckpointInfo
from .objstore import (
    DirectoryObjectStore,
    ObjectMissingError,
    ObjectStore,
    ObjectStoreLike,
    ObjectStoreSettings,
    RemoteUnavailableError,
    TierSettings,
    open_object_store,
)
from .remote import CheckpointGoneError, DivergedError, FencedError
from .remote_pull import PullResult, pull
from .schema import WEIGHT, ZSetSchema
from .settings import EngineSettings
from .spine import Spine, SpineStats
from .spine_store import MemoryBudget

__all__ = [
    "WEIGHT",
    "Batch",
    "BatchFile",
    "CheckpointGoneError",
    "CheckpointInfo",
    "CheckpointNotFoundError",
    "CommitFailedError",
    "CommitHandle",
    "CorruptionError",
    "DirectoryObjectStore",
    "DivergedError",
    "EngineSettings",
    "FencedError",
    "FileLayer",
    "FingerprintMismatchError",
    "FormatVersionError",
    "GcResult",
    "LockedError",
    "ManifestMissingError",
    "MemoryBudget",
    "ObjectMissingError",
    "ObjectStore",
    "ObjectStoreLike",
    "ObjectStoreSettings",
    "PosixFileLayer",
    "PullResult",
    "RemoteUnavailableError",
    "SchemaMismatchError",
    "Spine",
    "SpineMeta",
    "SpineStats",
    "StorageError",
    "StorageLocation",
    "TierSettings",
    "WriteOptions",
    "ZSetSchema",
    "open_object_store",
    "pull",
]
