"""Validation of uploaded brain archives (gzip-compressed tar), streaming and bounded."""

from store.archive.inspect import ArchiveInspector, ArchiveRejected, ArchiveSummary, InspectLimits, inspect_bytes

__all__ = ["ArchiveInspector", "ArchiveRejected", "ArchiveSummary", "InspectLimits", "inspect_bytes"]
