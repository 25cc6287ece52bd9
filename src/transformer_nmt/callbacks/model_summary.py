"""The model summary at the start of training, without the columns that say nothing here."""

from __future__ import annotations

import logging

from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary
from lightning.pytorch.utilities.model_summary import (
    get_formatted_model_size,
    get_human_readable_count,
)

log = logging.getLogger(__name__)

_LEFT_OUT = ("FLOPs",)  # Lightning counts FLOPs only with an example_input_array; else 0


class ModelSummary(LightningModelSummary):
    """Lightning's layer table (name, type, parameters, mode) and parameter totals, logged to the
    console and ``train.log``, without the FLOPs column and total: Lightning measures FLOPs by
    running the module's ``example_input_array``, which a translation model has no single
    meaningful shape for, and otherwise prints ``0`` for every layer.
    """

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs,
    ) -> None:
        table = format_summary(summary_data, total_parameters, trainable_parameters, model_size)
        log.info("\n%s", table)


def format_summary(
    summary_data: list[tuple[str, list[str]]],
    total_parameters: int,
    trainable_parameters: int,
    model_size: float,
) -> str:
    """A text table of ``summary_data`` (Lightning's columns, less FLOPs) and the totals."""
    columns = [(name, values) for name, values in summary_data if name not in _LEFT_OUT]
    widths = [max(len(name), *(len(str(v)) for v in values)) for name, values in columns]
    rows = [[name for name, _ in columns], *zip(*(values for _, values in columns), strict=True)]
    cells = [zip(row, widths, strict=True) for row in rows]
    lines = [" | ".join(str(c).ljust(w) for c, w in row).rstrip() for row in cells]
    lines.insert(1, "-" * max(len(line) for line in lines))
    totals = [
        (get_human_readable_count(trainable_parameters), "Trainable params"),
        (get_human_readable_count(total_parameters - trainable_parameters), "Non-trainable params"),
        (get_human_readable_count(total_parameters), "Total params"),
        (get_formatted_model_size(model_size), "Total estimated model params size (MB)"),
    ]
    lines += [f"{value.strip():<10} {label}" for value, label in totals]
    return "\n".join(lines)
