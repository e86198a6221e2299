"""``python -m aliyun_training``: the package's command line (see ``aliyun_training.cli``)."""

from aliyun_training.cli import main

raise SystemExit(main())
