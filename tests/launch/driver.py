"""``python -m tests.launch.driver JSON``: ``launch_hosts`` in a process of its own, for Ctrl-C tests."""

import json
import sys
from pathlib import Path

from hipress.launch.hosts import parse_hosts
from hipress.launch.remote import launch_hosts
from hipress.launch.ssh import SSHOptions


def main() -> int:
    cfg = json.loads(sys.argv[1])
    opts = SSHOptions(port=cfg["port"], key=Path(cfg["key"]), known_hosts=Path(cfg["known_hosts"]),
                      connect_timeout=5.0)
    res = launch_hosts(parse_hosts(cfg["hosts"]), cfg["argv"], opts, {}, cfg["run_dir"],
                       remote_dir=cfg["remote_dir"], on_line=lambda line: print(line, flush=True))
    print("RESULT " + json.dumps({"rc": res.returncode, "interrupted": res.interrupted, "failure": res.failure}),
          flush=True)
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
