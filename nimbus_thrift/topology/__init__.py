"""The Python topology DSL: subclass Spout, Bolt or StatefulBolt; wire them in a Topology.

No PySpark here: this is what user code imports, in the client and in the runner.
"""

from .blobs import BlobNotFound, blob_path, load_blob, open_blob, read_blob
from .components import (Bolt, Component, ComponentSpec, Context, KeyState, Spout,
                         StatefulBolt)
from .grouping import Grouping, GroupingSpec
from .streams import DEFAULT_STREAM, Stream, TopologyError
from .topology import Topology, script_of

__all__ = ["BlobNotFound", "Bolt", "Component", "ComponentSpec", "Context",
           "DEFAULT_STREAM", "Grouping", "GroupingSpec", "KeyState", "Spout",
           "StatefulBolt", "Stream", "Topology", "TopologyError", "blob_path", "load_blob",
           "open_blob", "read_blob", "script_of"]
