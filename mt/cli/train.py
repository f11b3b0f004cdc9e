"""``mt-train`` / ``python -m mt.train``: compose the Hydra config and run the main job.

Examples:
    python -m mt.train                                 # the number-words demo
    python -m mt.train experiment=multi30k_en_de data.dir=../shared/data/multi30k
    torchrun --nproc_per_node=2 -m mt.train experiment=multi30k_en_de
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
from omegaconf import DictConfig

from mt.config import register_configs, to_config

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")

register_configs()


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def _main(dcfg: DictConfig) -> None:
    from mt.train.loop import train

    logging.getLogger("mt").setLevel(logging.INFO)
    train(to_config(dcfg))


def main() -> None:
    _main()


if __name__ == "__main__":
    main()
