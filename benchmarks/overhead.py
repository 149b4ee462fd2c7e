"""make bench-overhead: what a deploy adds to the server's own start when the image and the weights are present.

Brings up the simulated cluster (4 nodes: inventory/local) and deploys once. Then, --runs times and
alternating, tears the deployment down (teardown.yml: the image and the weights stay on every node) and
deploys again, once as a user would (the run finds every node holding the image and the weights of the last
verified deploy and skips those stages) and once down the full path (-e sparkfleet_skip_unchanged=false:
the image and weights stages check their stage on every node). Each deploy's wall time, less the server's
own start (the report's boot_s, vllm serve's start to its health), is the overhead. Issue D's target: an
overhead of 10 s or less.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from noop_rerun import BIN, finish, start, timed


def boot_s(out):
    """The server's own start, as the run's report recorded it."""
    found = re.search(r"^sparkfleet report: (\S+)$", out, re.M)
    if not found:
        raise SystemExit("the deploy printed no report:\n" + out[-3000:])
    report = json.loads(Path(found.group(1)).read_text())
    boots = [e["boot_s"] for e in report["endpoints"].values() if e.get("boot_s") is not None]
    if not boots:
        raise SystemExit("the report has no server start: %s" % report["endpoints"])
    return max(boots)


def main():
    args, sim = start(__doc__, "overhead.json")
    playbook = [str(BIN / "ansible-playbook"), "-i", "local"]
    runs = {"default": [], "full_path": []}
    try:
        rc, _secs, out = timed(playbook + ["deploy_mimo.yml"])
        if rc != 0:
            raise SystemExit("the first deploy failed:\n" + out[-3000:])
        for _run in range(args.runs):
            for name, extra in (("default", []), ("full_path", ["-e", "sparkfleet_skip_unchanged=false"])):
                rc, _secs, out = timed(playbook + ["teardown.yml"])
                if rc != 0:
                    raise SystemExit("the teardown failed:\n" + out[-3000:])
                rc, secs, out = timed(playbook + ["deploy_mimo.yml"] + extra)
                if rc != 0:
                    raise SystemExit("a deploy after the teardown failed:\n" + out[-3000:])
                boot = boot_s(out)
                runs[name].append({"wall_s": round(secs, 1), "boot_s": boot, "overhead_s": round(secs - boot, 1)})
    finally:
        if not args.keep:
            subprocess.run(sim + ["down"], check=False, capture_output=True)
    result = {"nodes": 4, "runs": runs}
    for name, rows in runs.items():
        result[name] = {key: round(statistics.median(r[key] for r in rows), 1)
                        for key in ("wall_s", "boot_s", "overhead_s")}
    result["full_path_over_default"] = round(result["full_path"]["wall_s"] / result["default"]["wall_s"], 2)
    return finish(args, result)


if __name__ == "__main__":
    sys.exit(main())
