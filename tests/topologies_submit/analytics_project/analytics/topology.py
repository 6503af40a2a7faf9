"""A package project: this file is analytics/topology.py under the project root."""

from nimbus_thrift.topology import Grouping, Topology

from .bolts import TallyBolt, TokenBolt
from .spouts import LineSpout


class Analytics(Topology):
    name = "analytics-demo"
    config = {"topology.workers": 2}

    lines = LineSpout.spec()
    tokens = TokenBolt.spec(inputs=[lines], par=2)
    tally = TallyBolt.spec(inputs={tokens: Grouping.fields("word")}, par=2)
