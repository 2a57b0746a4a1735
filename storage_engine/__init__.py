"""Spindle's storage engine: Z-set batches, LSM spines, checkpoints. See README.md."""

from .batch import Batch
from .batch_file import BatchFile, WriteOptions
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
from .fileio import FileLayer, PosixFileLayer
from .location import GcResult, SpineMeta, StorageLocation
from .manifest import CheckpointInfo
from .schema import WEIGHT, ZSetSchema
from .settings import EngineSettings
from .spine import Spine, SpineStats

__all__ = [
    "WEIGHT",
    "Batch",
    "BatchFile",
    "CheckpointInfo",
    "CheckpointNotFoundError",
    "CommitFailedError",
    "CorruptionError",
    "EngineSettings",
    "FileLayer",
    "FingerprintMismatchError",
    "FormatVersionError",
    "GcResult",
    "LockedError",
    "ManifestMissingError",
    "PosixFileLayer",
    "SchemaMismatchError",
    "Spine",
    "SpineMeta",
    "SpineStats",
    "StorageError",
    "StorageLocation",
    "WriteOptions",
    "ZSetSchema",
]
