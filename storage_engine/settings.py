"""Tunables of the storage engine. Components (file layer, clock) are injected separately."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class EngineSettings(BaseModel):
    """Engine configuration; the platform's settings class embeds one of these."""

    memory_budget_bytes: int = Field(256 << 20, gt=0, description="in-memory batches, all spines")
    cache_budget_bytes: int = Field(64 << 20, gt=0, description="decoded-block LRU cache")
    max_memory_batch_bytes: int = Field(
        16 << 20, gt=0, description="merge outputs larger than this are streamed to files"
    )
    block_rows: int = Field(65536, gt=0, description="rows per block in batch files")
    compression: Literal["lz4", "zstd"] | None = None
    bloom: bool = True
    merge_fanout: int = Field(4, ge=2, description="batches of one size tier merged together")
    merge_base_rows: int = Field(8192, gt=0, description="batches up to this size are tier 0")
    merge_threads: int = Field(
        2, ge=1, description="threads running a location's merges (of disjoint batches)"
    )
    max_batches_per_spine: int = Field(
        48, gt=0, description="inserts wait for merges beyond this many batches"
    )
    write_attempts: int = Field(5, ge=1, description="tries for a failing durable write")
    write_backoff_s: float = Field(0.05, ge=0, description="first retry delay; doubles each try")
    max_pending_commits: int = Field(
        16, ge=1, description="queued commit requests before commit_async waits (backpressure)"
    )
    remote_close_timeout_s: float = Field(
        30.0, ge=0, description="close() waits this long for uploads; the rest resume at open"
    )
