"""Offline W&B runs read back without the service: their protobuf records, run name and config."""

import json
import struct


def wandb_records(path):
    """The protobuf records of an offline ``run-*.wandb`` file (LevelDB log format)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    position, pending = 7, b""
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_run(job_dir):
    """(group, name, config) of the job's offline W&B run."""
    (log,) = job_dir.glob("wandb/offline-run-*/run-*.wandb")
    group, name, config = None, None, {}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            group, name = record.run.run_group, record.run.display_name
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            config.update({item.key: json.loads(item.value_json) for item in items})
    return group, name, config
