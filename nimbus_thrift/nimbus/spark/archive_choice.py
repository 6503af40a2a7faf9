"""Which class archive each launch maps or lists its classes for
(:class:`ArchiveChoice`), and what becomes of the list or the archive once the
launch's JVM has run a batch or has ended.

Apart from :mod:`.archive`, which knows one installation's archives and nothing of
the launcher's runs: choosing needs the runs (only one launch at a time lists its
classes, so that one dump serves all) and their records (``launch.json`` names the
list and the archive each launch uses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from ...runner.spec import RunSpec
from .archive import JVM_CRASH, ClassArchive, archive_layout, unlink
from .proctree import proc_cmdline
from .records import Run
from .status import launch_stderr
from .submit import user_confs


class ArchiveChoice:
    """The class archive of a launcher's launches.

    Args:
        archive: the installation's archives, or None (no cache directory, no Java):
            then no launch gets class data sharing options.
        app_home: the applications' SPARK_HOME (:meth:`.app_home.AppSparkHome.path`),
            part of an archive's key; called only when a launch may get an archive.
        runs: the launcher's runs now.
    """

    def __init__(self, archive: ClassArchive | None, app_home: Callable[[], Path | None],
                 runs: Callable[[], list[Run]], *, record: bool = True):
        self.archive = archive
        self.app_home = app_home
        self.runs = runs
        #: False under run_as_user: a launch maps an archive made already but never
        #: lists its classes, which its JVM would write into the daemon's cache as
        #: the topology's user (the archive is made by ``nimbus-thrift warm-up``).
        self.record = record

    def options(self, run: Run | None, run_spec: RunSpec
                ) -> tuple[list[str], Path | None, Path | None]:
        """``(options, archive mapped, class list written)`` of the next launch of
        ``run``, or of a standby for None (:class:`ClassArchive`): none when the
        topology sets the driver's default options or class data sharing options of
        its own."""
        key = self.key(user_confs(run_spec))
        if self.archive is None or key is None:
            return [], None, None
        others = [r for r in self.runs() if r is not run]
        listing = self.archive.dumping or any(r.class_list and r.alive() for r in others)
        return self.archive.options(key, record=self.record and not listing)

    def key(self, user: Mapping[str, str]) -> str | None:
        """The key of the class archive a launch with the topology's ``spark.*`` confs
        ``user`` maps, or None when it gets none (no cache, or the topology sets the
        driver's default options or class data sharing options of its own)."""
        layout = archive_layout(user)
        if self.archive is None or layout is None:
            return None
        return self.archive.key(str(self.app_home()),
                                user.get("spark.driver.extraClassPath", ""), layout)

    def archive_for(self, conf: Mapping[str, Any]) -> Path | None:
        """The class archive (made or yet to be made) a topology with configuration
        ``conf`` would map, or None when it would get none."""
        key = self.key(user_confs(conf))
        return None if self.archive is None or key is None \
            else self.archive.archive(key)

    def done(self, run: Run) -> None:
        """``run``'s JVM is gone: delete its class list, and the archive it mapped if
        it crashed."""
        if run.class_list:
            unlink(Path(run.class_list))
        elif run.class_archive and run.exit_code != 0 and any(
                JVM_CRASH in line for line in launch_stderr(run.dir.logs / "stderr",
                                                            below=run.dir.root)):
            ClassArchive.discard(Path(run.class_archive))
        run.class_list = ""
        run.class_archive = ""

    def dump(self, run: Run) -> None:
        """Once an application listing its classes has run a batch (so the list holds
        what starting one loads), dump them into the class archive."""
        if not run.class_list or self.archive is None:
            return
        last = run.status_file()
        if last is None or last.batch_id < 1 or last.state not in ("running", "paused"):
            return
        classes, run.class_list = Path(run.class_list), ""
        self.archive.dump(classes, proc_cmdline(run.pid))
        run.save()
