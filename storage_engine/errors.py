"""Every error the storage engine raises on purpose derives from `StorageError`."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of the engine's deliberate errors."""


class CorruptionError(StorageError):
    """Bytes on disk do not match what was written: bad checksum, truncation, bad magic.

    Always names the file and, when known, the block, so an operator can find it.
    """

    def __init__(self, path: str, detail: str, block: int | None = None) -> None:
        self.path = path
        self.block = block
        self.detail = detail
        where = f"{path} (block {block})" if block is not None else path
        super().__init__(f"corrupt storage file {where}: {detail}")


class FormatVersionError(StorageError):
    """A file was written by a format version this build cannot read."""


class LockedError(StorageError):
    """The storage location is held by another process."""


class FingerprintMismatchError(StorageError):
    """The checkpoint was taken by a circuit whose stateful part differs from the caller's."""


class CheckpointNotFoundError(StorageError):
    """The requested checkpoint uuid is not in the manifest."""


class ManifestMissingError(StorageError):
    """Checkpoint directories exist but the manifest does not: refuse rather than guess."""


class SchemaMismatchError(StorageError):
    """A batch or spine was used with a schema other than the one it was created with."""


class CommitFailedError(StorageError):
    """A commit gave up after its retries; earlier checkpoints are intact."""
