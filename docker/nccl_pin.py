"""Install (or check) the one NCCL version both images must link.

`python nccl_pin.py --install requirements/nccl.txt` pip-installs the pinned `nvidia-nccl-cu13`;
`python nccl_pin.py --check requirements/nccl.txt` exits 1, naming both versions, when the
installed one differs. The pin lives in one file that the trainer and server images both read.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path


def pinned(requirements: Path) -> tuple[str, str]:
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            return name.strip(), version.strip()
    raise SystemExit(f"{requirements}: no `name==version` pin found")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--install", type=Path)
    mode.add_argument("--check", type=Path)
    args = parser.parse_args()
    name, version = pinned(args.install or args.check)
    if args.install:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", f"{name}=={version}"]
        return subprocess.run(cmd, check=False, timeout=900).returncode
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        print(f"{name} is not installed; the pin is {version}", file=sys.stderr)
        return 1
    if installed != version:
        print(f"{name} {installed} is installed but both images must link {version}", file=sys.stderr)
        return 1
    print(f"{name}=={version} ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
