"""Export a checkpoint to CTranslate2 or Hugging Face transformers (``mt-export``, see ``mt.export.cli``).

``export_ctranslate2`` and ``export_hf`` read the checkpoint only (``mt.checkpoint``), never ``mt.train``;
the ``ctranslate2`` and ``transformers`` packages (the ``export`` extra) are imported when an export runs.
"""

from mt.export.common import ExportError
from mt.export.ctranslate2 import export_ctranslate2
from mt.export.hf import export_hf

__all__ = ["ExportError", "export_ctranslate2", "export_hf"]
