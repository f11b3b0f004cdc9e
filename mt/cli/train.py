"""``mt-train`` / ``python -m mt.train``: compose the Hydra config and run the main job.

Examples:
    python -m mt.train                                 # the number-words demo
    python -m mt.train experiment=multi30k_en_de data.dir=../shared/data/multi30k
    torchrun --nproc_per_node=2 -m mt.train experiment=multi30k_en_de

Bad overrides, config values, data, checkpoints and devices are reported as one line,
``mt-train: error: ...``, without a traceback (``--debug`` or ``MT_DEBUG=1`` shows it).
"""

from __future__ import annotations

import logging
import sys

from omegaconf import DictConfig

from mt.cli.hydra_app import run_hydra_job
from mt.config import CONF_DIR, register_configs, to_config


def train_job(dcfg: DictConfig) -> None:
    """The Hydra job: train (or resume) the composed config."""
    from mt.train.loop import train

    logging.getLogger("mt").setLevel(logging.INFO)
    train(to_config(dcfg))


def main() -> None:
    register_configs()
    sys.exit(run_hydra_job("mt-train", train_job, CONF_DIR, "config"))


if __name__ == "__main__":
    main()
