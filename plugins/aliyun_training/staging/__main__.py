"""Stage a dataset version from the command line (the same engine the staging operator runs).

    python -m aliyun_training.staging --source oss://bucket/cifar10/v1/ --target /mnt/cpfs/cifar10 \
        --version v1 --region cn-wulanchabu [--endpoint oss-cn-wulanchabu-internal.aliyuncs.com]

OSS credentials come from the default chain: ``ALIBABA_CLOUD_ACCESS_KEY_ID``,
``ALIBABA_CLOUD_ACCESS_KEY_SECRET`` and ``ALIBABA_CLOUD_SECURITY_TOKEN`` (a staging pod gets them
from a Secret), RRSA, or the instance's RAM role. Progress goes to stderr; the StagedDataset record
is the last line on stdout, as JSON. Exits 2 on bad input and 1 when staging fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from aliyun_training.staging.engine import StagingError, stage_dataset
from aliyun_training.staging.opening import open_source
from aliyun_training.validation import SpecError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aliyun_training.staging", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--source", required=True, help="object store prefix, e.g. file:///data/cifar10/v1/")
    parser.add_argument("--target", required=True, help="filesystem directory that holds the versions")
    parser.add_argument("--version", required=True, help="dataset version; becomes <target>/<version>/")
    parser.add_argument("--workers", type=int, default=16, help="objects or byte ranges copied in parallel")
    parser.add_argument("--region", default="", help="OSS region, e.g. cn-wulanchabu (oss:// sources)")
    parser.add_argument("--endpoint", default=None, help="OSS endpoint; default: the region's public one")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        options = {}
        if args.source.startswith("oss://"):
            from aliyun_training.staging.oss import OssClientConfig

            options["config"] = OssClientConfig.from_environment(args.endpoint, args.region, args.workers)
        source = open_source(args.source, **options)
        staged = stage_dataset(source, args.target, args.version, workers=args.workers)
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
