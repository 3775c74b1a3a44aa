"""What the runtime (`actors`) uses of persistence beyond the public API.

A curated surface for our own packages, not for applications: the names here may
change in any release. Everything an application needs is in `persistence`
(`open_store`, `Store`, the store protocols and `StoreFeatures`); the private
modules behind these names stay private, so a package above this one imports from
here and never from ``persistence._*``.
"""

from . import _mutations as mutations
from . import _telemetry as telemetry
from ._hooks import skipped
from ._integrity import check_store
from ._killpoints import ENV_KILL_AT, POINTS
from ._lineage import root_of, walk
from ._metadata import check_metadata_patch
from ._migrations import latest_version
from ._queries import load_queries
from ._store import HolderAnnouncement, features_of, submits
from ._urls import display_url, parse_store_url, scrubbed, split_store_options

__all__ = [
    "ENV_KILL_AT",
    "POINTS",
    "HolderAnnouncement",
    "check_metadata_patch",
    "check_store",
    "display_url",
    "features_of",
    "latest_version",
    "load_queries",
    "mutations",
    "parse_store_url",
    "root_of",
    "scrubbed",
    "skipped",
    "split_store_options",
    "submits",
    "telemetry",
    "walk",
]
