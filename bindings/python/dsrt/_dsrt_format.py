"""dsrt's checkpoint format (docs/checkpoints.md) read and written in Python, for the DeepSpeed
import and export (ds_checkpoint.py): a manifest, one shard per rank, the client state and the
frozen tensors' values, every part checksummed with CRC-32C.

The writer produces a one-rank checkpoint (one shard, one segment per tensor); dsrt's loader
reshards it into any world size and ZeRO stage. The reader accepts any world size and verifies
every block it reads, the shards' tables, the manifest and the client state."""

import json
import os
import random
import shutil
import struct

import numpy as np

from ._crc32c import crc32c, crc32c_blocks

FORMAT_VERSION = 1
HEADER_BYTES = 4096
BLOCK_BYTES = 1 << 16  # blocks of the shards this module writes
_MAGIC = b"DSRTSHRD"
MANIFEST, MANIFEST_CRC, CLIENT_FILE, FROZEN_FILE = "manifest.json", "manifest.crc32c", "client_state.bin", \
    "frozen_params.bin"


class FormatError(Exception):
    """A dsrt checkpoint that cannot be read (the message names the file and what is wrong)."""


def _hex(value):
    return "%016x" % value


def _shard_header(rank, world, streams, elems, block_bytes, save_id):
    data = elems * streams * 4
    blocks = (data + block_bytes - 1) // block_bytes
    head = bytearray(HEADER_BYTES)
    head[0:8] = _MAGIC
    struct.pack_into("<IIIII", head, 8, FORMAT_VERSION, HEADER_BYTES, rank, world, streams)
    struct.pack_into("<QQQQ", head, 32, elems, block_bytes, blocks, save_id)
    struct.pack_into("<I", head, 64, crc32c(bytes(head[:64])))
    return bytes(head), blocks


def _write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_checkpoint(directory, tag, *, tensors, streams, state_names, optimizer, working_dtype, zero_stage,
                     counters, scaler, scheduler_iteration, client_state, groups, config, frozen=(),
                     block_bytes=BLOCK_BYTES, save_latest=True):
    """Writes directory/tag as a one-rank dsrt checkpoint and (save_latest) points `latest` at it.

    tensors: [(name, shape, group)] in the order the engine registers them; streams: one list per
    stream (the fp32 masters, then each optimizer state named in state_names) of float32 arrays in
    tensor order; counters: global_step, applied_steps, skipped_steps; scaler: dynamic, cur_scale,
    cur_iter, last_overflow_iter, cur_hysteresis; groups: one dict of hyper-parameters per group
    (dsrt's names); config: the effective config (dict); frozen: [(name, shape, float32 array)]."""
    if tag in ("", ".", "..") or tag.startswith(".") or tag == "latest" or tag.startswith("latest.") or "/" in tag:
        raise ValueError("checkpoint tag %r is not a plain folder name" % tag)
    os.makedirs(directory, exist_ok=True)
    save_id = random.getrandbits(64)
    tmp = os.path.join(directory, ".tmp-%s-%s" % (tag, _hex(save_id)))
    os.makedirs(tmp)
    try:
        elems = sum(int(np.prod(shape, dtype=np.int64)) for _, shape, _ in tensors)
        for s, stream in enumerate(streams):
            if len(stream) != len(tensors):
                raise ValueError("stream %d holds %d tensors, the model %d" % (s, len(stream), len(tensors)))
        data = np.empty(elems * len(streams), dtype="<f4")
        offset = 0
        for stream in streams:
            for (name, shape, _), value in zip(tensors, stream):
                value = np.ascontiguousarray(value, dtype=np.float32).reshape(-1)
                if value.size != int(np.prod(shape, dtype=np.int64)):
                    raise ValueError("%s: %d values for shape %r" % (name, value.size, tuple(shape)))
                data[offset:offset + value.size] = value
                offset += value.size
        header, blocks = _shard_header(0, 1, len(streams), elems, block_bytes, save_id)
        raw = data.tobytes()
        table = struct.pack("<%dI" % blocks, *crc32c_blocks(raw, block_bytes)) if blocks else b""
        table_crc = crc32c(table)
        shard_name = "zero_rank_00000.shard"
        _write_file(os.path.join(tmp, shard_name), header + raw + table + struct.pack("<I", table_crc))
        client_state = bytes(client_state or b"")
        _write_file(os.path.join(tmp, CLIENT_FILE), client_state)
        manifest = {
            "format": "dsrt-checkpoint", "format_version": FORMAT_VERSION, "tag": tag, "save_id": _hex(save_id),
            "world_size": 1, "zero_stage": int(zero_stage), "master_dtype": "f32", "working_dtype": working_dtype,
            "optimizer": optimizer, "streams": ["fp32_master"] + list(state_names), "block_bytes": block_bytes,
            "node_local_storage": False,
            "counters": {"global_step": int(counters["global_step"]), "applied_steps": int(counters["applied_steps"]),
                         "skipped_steps": int(counters["skipped_steps"]), "micro_step": 0},
            "loss_scaler": {"dynamic": bool(scaler["dynamic"]), "cur_scale": float(scaler["cur_scale"]),
                            "cur_iter": int(scaler["cur_iter"]), "last_overflow_iter": int(scaler["last_overflow_iter"]),
                            "cur_hysteresis": int(scaler["cur_hysteresis"])},
            "scheduler": {"last_batch_iteration": int(scheduler_iteration)},
            "client_state": {"file": CLIENT_FILE, "bytes": len(client_state), "crc32c": _hex(crc32c(client_state))},
            "model_16bit": "",
            "tensors": [{"name": name, "shape": [int(d) for d in shape], "numel": int(np.prod(shape, dtype=np.int64)),
                         "group": int(group)} for name, shape, group in tensors],
        }
        if frozen:
            manifest["frozen_file"] = FROZEN_FILE
            entries, values, at = [], [], 0
            for name, shape, value in frozen:
                value = np.ascontiguousarray(value, dtype="<f4").reshape(-1)
                entries.append({"name": name, "shape": [int(d) for d in shape], "numel": int(value.size),
                                "frozen": True, "offset": at, "crc32c": _hex(crc32c(value.tobytes()))})
                values.append(value.tobytes())
                at += value.nbytes
            manifest["frozen_tensors"] = entries
            _write_file(os.path.join(tmp, FROZEN_FILE), b"".join(values))
        manifest["param_groups"] = [{k: float(v) for k, v in g.items()} for g in groups]
        manifest["shards"] = [{"rank": 0, "file": shard_name, "bytes": HEADER_BYTES + len(raw) + len(table) + 4,
                               "table_crc32c": _hex(table_crc),
                               "segments": [[t, 0, int(np.prod(shape, dtype=np.int64))]
                                            for t, (_, shape, _) in enumerate(tensors)]}]
        manifest["config"] = config
        text = (json.dumps(manifest, indent=1) + "\n").encode()
        _write_file(os.path.join(tmp, MANIFEST), text)
        _write_file(os.path.join(tmp, MANIFEST_CRC), b"crc32c %08x bytes %d\n" % (crc32c(text), len(text)))
        final = os.path.join(directory, tag)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if save_latest:
        latest_tmp = os.path.join(directory, "latest.tmp")
        _write_file(latest_tmp, (tag + "\n").encode())
        os.rename(latest_tmp, os.path.join(directory, "latest"))
    return os.path.join(directory, tag)


def resolve_tag(directory, tag=None):
    if tag is None:
        latest = os.path.join(directory, "latest")
        if not os.path.isfile(latest):
            raise FormatError("%s has no 'latest' file; name the tag to read" % directory)
        with open(latest) as f:
            tag = f.read().strip()
    return tag, os.path.join(directory, tag)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise FormatError("cannot read %s: %s" % (path, error.strerror or error)) from error


class Checkpoint:
    """A dsrt checkpoint read whole: manifest (dict), tensors ([(name, shape, group)]), streams
    (names), read_stream(i) -> [float32 arrays in tensor order], client_state (bytes) and frozen
    ([(name, shape, float32 array)]). Every byte it returns was checked against its CRC-32C."""

    def __init__(self, directory, tag=None):
        self.tag, self.path = resolve_tag(directory, tag)
        text = _read(os.path.join(self.path, MANIFEST))
        check = _read(os.path.join(self.path, MANIFEST_CRC)).decode(errors="replace").split()
        if len(check) != 4 or check[0] != "crc32c" or check[2] != "bytes":
            raise FormatError("%s is malformed" % os.path.join(self.path, MANIFEST_CRC))
        if int(check[3]) != len(text) or int(check[1], 16) != crc32c(text):
            raise FormatError("%s: checksum mismatch (the manifest is damaged)" % os.path.join(self.path, MANIFEST))
        self.manifest = m = json.loads(text)
        if m.get("format") != "dsrt-checkpoint" or m.get("format_version") != FORMAT_VERSION:
            raise FormatError("%s is not a dsrt checkpoint of format version %d" % (self.path, FORMAT_VERSION))
        self.tensors = [(t["name"], tuple(t["shape"]), int(t.get("group", 0))) for t in m["tensors"]]
        self.streams = list(m["streams"])
        self._shards = {}
        client = m["client_state"]
        self.client_state = _read(os.path.join(self.path, client["file"])) if client["bytes"] else b""
        if len(self.client_state) != client["bytes"] or crc32c(self.client_state) != int(client["crc32c"], 16):
            raise FormatError("%s: the client state does not match its checksum" % self.path)
        self.frozen = []
        if m.get("frozen_tensors"):
            raw = _read(os.path.join(self.path, m["frozen_file"]))
            for t in m["frozen_tensors"]:
                piece = raw[t["offset"]:t["offset"] + 4 * t["numel"]]
                if len(piece) != 4 * t["numel"] or crc32c(piece) != int(t["crc32c"], 16):
                    raise FormatError("%s: frozen tensor %s does not match its checksum" % (self.path, t["name"]))
                self.frozen.append((t["name"], tuple(t["shape"]),
                                    np.frombuffer(piece, dtype="<f4").astype(np.float32).reshape(t["shape"])))

    def _shard_data(self, shard):
        """The verified data of one shard: float32 [streams, elements per stream]."""
        key = shard["rank"]
        if key in self._shards:
            return self._shards[key]
        path = os.path.join(self.path, shard["file"])
        raw = _read(path)
        if len(raw) != shard["bytes"]:
            raise FormatError("%s is %d bytes but the manifest says %d" % (path, len(raw), shard["bytes"]))
        head = raw[:HEADER_BYTES]
        if head[:8] != _MAGIC or struct.unpack_from("<I", head, 64)[0] != crc32c(head[:64]):
            raise FormatError("%s: bad shard header" % path)
        _, _, rank, world, streams = struct.unpack_from("<IIIII", head, 8)
        elems, block_bytes, blocks, save_id = struct.unpack_from("<QQQQ", head, 32)
        if streams != len(self.streams) or _hex(save_id) != self.manifest["save_id"] or rank != key:
            raise FormatError("%s does not belong to this checkpoint (streams, save id or rank differ)" % path)
        data_bytes = elems * streams * 4
        table = raw[HEADER_BYTES + data_bytes:HEADER_BYTES + data_bytes + 4 * blocks]
        table_crc = struct.unpack_from("<I", raw, HEADER_BYTES + data_bytes + 4 * blocks)[0]
        if table_crc != crc32c(table) or table_crc != int(shard["table_crc32c"], 16):
            raise FormatError("%s: the checksum table is damaged" % path)
        data = raw[HEADER_BYTES:HEADER_BYTES + data_bytes]
        if list(struct.unpack("<%dI" % blocks, table)) != crc32c_blocks(data, block_bytes):
            raise FormatError("%s: a data block does not match its checksum (damaged)" % path)
        array = np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(streams, elems)
        self._shards[key] = array
        return array

    def read_stream(self, index):
        """Full tensors of stream `index` (0: fp32 masters), float32, in tensor order."""
        out = [np.full(int(np.prod(shape, dtype=np.int64)), np.nan, dtype=np.float32) for _, shape, _ in self.tensors]
        covered = [0] * len(out)
        for shard in self.manifest["shards"]:
            data = self._shard_data(shard)[index]
            at = 0
            for tensor, begin, count in shard["segments"]:
                out[tensor][begin:begin + count] = data[at:at + count]
                covered[tensor] += count
                at += count
        for (name, shape, _), value, n in zip(self.tensors, out, covered):
            if n != value.size:
                raise FormatError("%s: the shards hold %d of the %d elements of %s" % (self.path, n, value.size, name))
        return [value.reshape(shape) for (_, shape, _), value in zip(self.tensors, out)]
