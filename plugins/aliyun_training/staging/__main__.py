"""Stage a dataset version from the command line (the same engine the staging operator runs).

    python -m aliyun_training.staging --source file:///data/v1/ --target /mnt/cpfs/cifar10 --version v1

Prints the StagedDataset record as JSON; exits 2 on bad input and 1 when staging fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from aliyun_training.spec import SpecError
from aliyun_training.staging.engine import StagingError, stage_dataset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aliyun_training.staging", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--source", required=True, help="object store prefix, e.g. file:///data/cifar10/v1/")
    parser.add_argument("--target", required=True, help="filesystem directory that holds the versions")
    parser.add_argument("--version", required=True, help="dataset version; becomes <target>/<version>/")
    parser.add_argument("--workers", type=int, default=8, help="objects copied in parallel")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        staged = stage_dataset(args.source, args.target, args.version, workers=args.workers)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StagingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(staged.model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
