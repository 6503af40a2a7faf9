"""The SPARK_HOME of a launcher's applications (:class:`AppSparkHome`): the mirror of
PySpark's directory without its zipped Python code (:func:`.install.mirror_spark_home`),
so that the applications' Python processes import PySpark's compiled modules.

Its ``conf`` is PySpark's own (a link, when PySpark's directory has one; the pip
package has none). The ``spark-defaults.conf`` there, or in ``$SPARK_CONF_DIR``, is
merged into each application's properties file (:func:`.properties.spark_defaults`),
since a spark-submit given ``--properties-file`` reads none itself.

One object for the launcher, because two jobs need the same path: the environment
of every application (:mod:`.spawn`) and the key of the class archive a launch maps
(:mod:`.archive_choice`: the jars' paths are part of it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from .install import MIRROR_DIR, mirror_spark_home

log = structlog.get_logger(__name__)


class AppSparkHome:
    """Makes the mirror at the first launch that needs it, once.

    Args:
        spark_home: PySpark's directory, or None when there is no PySpark.
        cache_dir: the launcher's cache directory (the mirror goes in its
            :data:`.install.MIRROR_DIR`), or None for no mirror.
    """

    def __init__(self, spark_home: Path | None, cache_dir: Path | None):
        self.spark_home = spark_home
        self.cache_dir = cache_dir
        #: The mirror, once made.
        self.mirror: Path | None = None
        self._lock = threading.Lock()

    def path(self) -> Path | None:
        """The application's SPARK_HOME: the mirror of PySpark's directory in the cache
        directory, or without one PySpark's directory itself."""
        if self.spark_home is None or self.cache_dir is None:
            return self.spark_home
        with self._lock:
            if self.mirror is None:
                try:
                    self.mirror = mirror_spark_home(self.spark_home,
                                                    self.cache_dir / MIRROR_DIR)
                except OSError as exc:
                    log.warning("spark_home_mirror_failed", error=str(exc),
                                spark_home=str(self.spark_home))
                    return self.spark_home      # and try again at the next launch
            return self.mirror
