"""What the tests share, each defined once.

- ``corpus``: the toy English/German corpus and its files.
- ``tiny_model``: ``tiny_config(**overrides)``, the one small model, read from conf/model/tiny.yaml.
- ``reverse_task``: a task a tiny model learns in seconds, and the model trained on it.
- ``tiny_checkpoint``: a tokenizer and checkpoint in this project's format, built offline.
- ``toy_checkpoint``: a tiny model trained for seconds on the toy corpus, as a loaded checkpoint.
- ``marian_folder``: a small opus-mt-like Marian / Pegasus folder, built offline.
- ``decoding``: what the search tests share: a row without padding, counted projections.
- ``commands``: the scripts at the repository root, run in a subprocess.
- ``hydra_config``: ``conf/`` composed as ``train.py`` composes it.
- ``tiny_runs``: the overrides that shrink a ``train.py`` run to seconds, and its logged metrics.
- ``wandb_records``: an offline W&B run's name, group and config, read from its files.
- ``run_if``: ``@run_if(...)``, the one way a test skips: GPU, optional package, Linux, Multi30k,
  Chromium.
- ``slow``: fixtures that train or start processes, and the check that their tests are slow.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
