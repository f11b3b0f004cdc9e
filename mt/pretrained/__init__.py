"""Models trained elsewhere as mt checkpoints: Hugging Face ``MarianMTModel`` (OPUS-MT) and
``M2M100ForConditionalGeneration`` (M2M-100, NLLB-200) directories.

``import_hf(directory, out)`` reads a ``save_pretrained`` directory without running its code, maps its
architecture onto mt's config options (refusing by name what mt cannot represent), permutes its vocabulary
into mt's special ids, and writes a checkpoint that every mt command reads.
"""

from mt.pretrained.convert import ImportReport, import_hf
from mt.pretrained.files import HFDirectory, PretrainedError

__all__ = ["HFDirectory", "ImportReport", "PretrainedError", "import_hf"]
