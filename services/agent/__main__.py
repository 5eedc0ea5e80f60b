"""``python -m services.agent --node-id ...``: the same as ``gridledger agent ...``."""

import sys

from services.cli.main import main

sys.exit(main(["agent", *sys.argv[1:]]))
