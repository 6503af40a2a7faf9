from importlib import resources

from nimbus_thrift.topology import Spout


class LineSpout(Spout):
    outputs = {"line": str}

    def initialize(self, conf, context):
        self.lines = resources.files("analytics").joinpath("data/lines.txt").read_text().split("\n")

    def available(self):
        return len(self.lines)

    def read(self, start, end):
        for offset in range(start, end):
            yield [self.lines[offset]]
