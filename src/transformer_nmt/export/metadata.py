"""``transformer_nmt.json``: what an exported directory records besides its weights."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from transformer_nmt.checkpoint import LoadedCheckpoint
from transformer_nmt.model import TransformerConfig

METADATA_FILE = "transformer_nmt.json"


@dataclass(frozen=True)
class ExportMetadata:
    """Our model config, the language pair and the special ids of an exported model, and where
    it came from: enough to translate with the export exactly as with the checkpoint.

    ``bos_id`` is the decoder start id (a Marian tokenizer's is its pad id).
    """

    format: str  # marian | pegasus | ctranslate2
    model_config: dict
    src_lang: str
    tgt_lang: str
    bos_id: int
    eos_id: int
    pad_id: int
    source: str  # the checkpoint (or model) it was exported from
    quantization: str | None = None  # CTranslate2: how the weights are stored

    @classmethod
    def of(cls, checkpoint: LoadedCheckpoint, format: str, **extra) -> ExportMetadata:
        """The metadata of ``checkpoint`` exported to ``format``."""
        return cls(
            format=format,
            model_config=checkpoint.model.config.to_dict(),
            src_lang=checkpoint.src_lang,
            tgt_lang=checkpoint.tgt_lang,
            bos_id=checkpoint.bos_id,
            eos_id=checkpoint.eos_id,
            pad_id=checkpoint.pad_id,
            source=str(checkpoint.path),
            **extra,
        )

    @property
    def config(self) -> TransformerConfig:
        return TransformerConfig(**self.model_config)

    def write(self, directory: Path) -> Path:
        """Write ``directory/transformer_nmt.json`` (a directory being built atomically)."""
        path = Path(directory) / METADATA_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, directory: Path | str) -> ExportMetadata | None:
        """The metadata of an exported ``directory``, or None if it has none."""
        path = Path(directory) / METADATA_FILE
        if not path.is_file():
            return None
        recorded = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{f.name: recorded[f.name] for f in fields(cls) if f.name in recorded})
