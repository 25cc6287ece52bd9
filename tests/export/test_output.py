"""An export never deletes its own input, and overwrite=true replaces only an earlier export."""

import pytest

from transformer_nmt.export.errors import ExportOutputError
from transformer_nmt.export.metadata import METADATA_FILE
from transformer_nmt.export.output import check_export_output


def test_an_output_holding_the_input_is_refused_even_with_overwrite(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints" / "best.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"weights")
    for output in (tmp_path / "run", tmp_path / "run" / "checkpoints", ckpt, tmp_path):
        with pytest.raises(ExportOutputError) as error:
            check_export_output(output, [ckpt], overwrite=True)
        assert str(error.value) == (
            f"output {output} contains the export's input {ckpt}; replacing it would delete "
            f"that input: choose another output"
        )
    check_export_output(tmp_path / "run" / "hf", [ckpt], overwrite=True)  # beside it: fine


def test_overwrite_replaces_an_earlier_export_or_an_empty_directory_only(tmp_path):
    ckpt = tmp_path / "best.ckpt"
    earlier, mine, empty = tmp_path / "earlier", tmp_path / "mine", tmp_path / "empty"
    for directory in (earlier, mine, empty):
        directory.mkdir()
    (earlier / METADATA_FILE).write_text("{}")
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(FileExistsError, match="already exists; add overwrite=true"):
        check_export_output(earlier, [ckpt], overwrite=False)
    check_export_output(earlier, [ckpt], overwrite=True)
    check_export_output(empty, [ckpt], overwrite=True)
    with pytest.raises(ExportOutputError, match=r"is not an earlier export \(it has no transf"):
        check_export_output(mine, [ckpt], overwrite=True)
    with pytest.raises(ExportOutputError, match="is a file, not an earlier export"):
        check_export_output(mine / "thesis.tex", [ckpt], overwrite=True)
