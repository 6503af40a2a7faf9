"""What Java reads of the properties file the Spark launcher writes for each
application (nimbus/spark/properties.py): the same keys and values, whatever characters
they hold, read as Spark reads it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nimbus_thrift.nimbus.spark.properties import write_properties

pytestmark = pytest.mark.spark

#: Java reading a properties file as Spark does (``Utils.getPropertiesFromFile``:
#: ``Properties.load`` through a UTF-8 reader), printing each key and value as JSON
#: strings of UTF-16 code units.
JAVA_READER = """
import java.io.*; import java.nio.charset.StandardCharsets; import java.util.*;
public class ReadProps {
  static String hex(String s) { StringBuilder b = new StringBuilder();
    for (char c : s.toCharArray()) b.append(String.format("%04x", (int) c));
    return b.toString(); }
  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    try (Reader r = new InputStreamReader(new FileInputStream(a[0]), StandardCharsets.UTF_8)) {
      p.load(r); }
    for (String k : p.stringPropertyNames())
      System.out.println(hex(k) + " " + hex(p.getProperty(k)));
  }
}
"""


def _from_hex(units: str) -> str:
    data = bytes.fromhex(units)
    return data.decode("utf-16-be", "surrogatepass")


def test_java_reads_the_file_as_written(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    confs = {"spark.a": "plain", "spark.key with spaces": " lead and trail ",
             "spark.syntax=:#!": "a=b:c#d!e\\f", "spark.lines": "1\nspark.authenticate=false\r",
             "spark.tabs\tand\fforms": "\t\f", "spark.unicode.é": "€ \U0001f600 \x00\x7f",
             "spark.empty": ""}
    path = write_properties(tmp_path, confs)
    source = tmp_path / "ReadProps.java"
    source.write_text(JAVA_READER)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    out = subprocess.run([java, str(source), str(path)], capture_output=True, text=True,
                         timeout=120, env=env, check=True).stdout
    read = {_from_hex(key): _from_hex(value)
            for key, _, value in (line.partition(" ") for line in out.splitlines())}
    assert read == confs
