"""A topology's work directory made ready for a driver, in either deploy mode: its run
spec (``spec.json``), its code extracted (``code/``) and zipped as uploaded
(``code.zip``, the driver's ``--py-files``), and its ``control``."""

from __future__ import annotations

import os
import shutil

from ...runner.rundir import RunDir
from ...runner.spec import RunSpec, from_plan
from ...topology.validate import InvalidTopology
from ..launcher import LauncherError, LaunchSpec
from ..security.runas import OsUser, as_owner_of, own_work_dir
from .submit import extract_code


def prepare_work_dir(spec: LaunchSpec, rd: RunDir, user: OsUser | None) -> RunSpec:
    """Write ``rd`` for ``spec``, owned by ``user`` (None: the daemon's), and return
    its run spec. The code already extracted by an earlier launch is kept.

    Raises:
        LauncherError: the plan no longer validates, or a file could not be written
            (the message says which and why).
    """
    try:
        run_spec = from_plan(spec.topology_id, spec.name, spec.require_plan(),
                             spec.executors)
        if user is not None:
            own_work_dir(rd.root, user)
        else:
            rd.root.mkdir(parents=True, exist_ok=True)
        # The code is read as the daemon (its copy is the daemon's alone) and
        # written as the work directory's owner.
        with open(spec.code_path, "rb") as code, as_owner_of(rd.root):
            run_spec.write(rd.spec)
            zip_copy = rd.root / "code.zip"
            if not rd.code.is_dir() or not zip_copy.is_file():
                extract_code(code, rd.code)
                code.seek(0)
                tmp = zip_copy.with_name(".code.zip.tmp")
                with open(tmp, "wb") as out:
                    shutil.copyfileobj(code, out)
                os.replace(tmp, zip_copy)
            rd.set_control("active" if spec.active else "paused")
    except (InvalidTopology, OSError, ValueError) as exc:
        raise LauncherError(f"cannot prepare {rd.root}: {type(exc).__name__}: "
                            f"{exc}") from None
    return run_spec
