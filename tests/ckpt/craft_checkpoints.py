#!/usr/bin/env python3
"""Writes the crafted checkpoints of tests/ckpt/crafted/ (checked in; rerun to regenerate).

Each case is a one-rank checkpoint whose checksums are all correct (manifest.crc32c, the shard's
header CRC and block table) but whose content is impossible: sizes that overflow 64-bit
arithmetic, values out of range, trailing garbage, header padding that is not zero. A reader must
refuse each one with DSRT_ERR_CHECKPOINT and the text in the case's `expect` file; case `ok` must
read back the values written here. The same inputs, in the checkpoint fuzzer's format (4-byte
little-endian manifest length, the manifest, the shard), seed tests/fuzz/checkpoint_corpus/.

usage: craft_checkpoints.py OUT_DIR [FUZZ_CORPUS_DIR]
"""
import json
import os
import shutil
import struct
import sys

POLY = 0x82F63B78
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF


SAVE_ID = 0x1234ABCD5678EF00
HEADER = 4096


def shard_bytes(values, num_streams, block_bytes, elems=None, blocks=None, padding=None):
    """A shard file: header (fields + CRC, zero padding), data, block CRC table, table CRC."""
    data = b"".join(struct.pack("<f", v) for v in values)
    elems = len(values) // num_streams if elems is None else elems
    nblocks = (len(data) + block_bytes - 1) // block_bytes if blocks is None else blocks
    fields = bytearray(64)
    fields[0:8] = b"DSRTSHRD"
    struct.pack_into("<IIiiI", fields, 8, 1, HEADER, 0, 1, num_streams)
    struct.pack_into("<QQQQ", fields, 32, elems & (2**64 - 1), block_bytes, nblocks & (2**64 - 1), SAVE_ID)
    header = bytearray(HEADER)
    header[0:64] = fields
    struct.pack_into("<I", header, 64, crc32c(bytes(fields)))
    if padding is not None:
        header[padding] = 0x5A
    table = b"".join(struct.pack("<I", crc32c(data[i:i + block_bytes])) for i in range(0, len(data), block_bytes))
    table += struct.pack("<I", crc32c(table))
    return bytes(header) + data + table, crc32c(table[:-4])


def manifest(shard_size, table_crc, tensors, segments, block, **changes):
    m = {
        "format": "dsrt-checkpoint", "format_version": 1, "tag": "t", "save_id": "%016x" % SAVE_ID,
        "world_size": 1, "zero_stage": 0, "master_dtype": "f32", "working_dtype": "fp32", "optimizer": "SGD",
        "streams": ["fp32_master"], "block_bytes": block, "node_local_storage": False,
        "counters": {"global_step": 3, "applied_steps": 3, "skipped_steps": 0, "micro_step": 0},
        "loss_scaler": {"dynamic": False, "cur_scale": 1, "cur_iter": 0, "last_overflow_iter": -1,
                        "cur_hysteresis": 2},
        "scheduler": {"last_batch_iteration": 2},
        "client_state": {"file": "client_state.bin", "bytes": 0, "crc32c": "%016x" % 0},
        "model_16bit": "",
        "tensors": [{"name": n, "shape": s, "numel": k} for n, s, k in tensors],
        "shards": [{"rank": 0, "file": "zero_rank_00000.shard", "bytes": shard_size,
                    "table_crc32c": "%016x" % table_crc, "segments": segments}],
        "config": {},
    }
    for path, value in changes.items():
        obj = m
        keys = path.split(".")
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = value
    return m


VALUES = [0.5 * i - 3.0 for i in range(15)]  # tensor "w" [3, 5]


def case(name, expect, shard=None, manifest_changes=None, text_suffix="", tensors=None, segments=None,
         block_bytes=16):
    shard_file, table_crc = shard or shard_bytes(VALUES, 1, block_bytes)
    tensors = tensors or [("w", [3, 5], 15)]
    segments = segments or [[0, 0, 15]]
    m = manifest(len(shard_file), table_crc, tensors, segments, block_bytes, **(manifest_changes or {}))
    text = json.dumps(m, indent=1) + "\n" + text_suffix
    return name, expect, text.encode(), shard_file


def cases():
    big = 2 ** 31
    yield case("ok", "")
    # The shapes: 2^31 x 2^31 = 2^62 elements, whose fp32 bytes wrap 64 bits to 0.
    wrapped, wrapped_crc = shard_bytes([], 1, 16, elems=2 ** 62, blocks=0)
    yield case("tensor_2p31_squared", "not an integer in -2^53..2^53", shard=(wrapped, wrapped_crc),
               tensors=[("w", [big, big], big * big)], segments=[[0, 0, big * big]])
    yield case("shape_product_overflows", "a shape of more than 2^48 elements",
               tensors=[("w", [2 ** 30, 2 ** 30, 2 ** 30, 16], 15)])
    yield case("numel_beyond_limit", "\"numel\" is 1125899906842624, outside 0..281474976710656",
               tensors=[("w", [2 ** 25, 2 ** 25], 2 ** 50)], segments=[[0, 0, 2 ** 50]])
    yield case("shard_elems_wrap_but_tensor_small", "holds 1 streams of 4611686018427387904 elements",
               shard=(wrapped, wrapped_crc))
    # A header whose sizes agree with a manifest claiming 2^46 elements and the file's real size
    # only through wrap-around in 2 streams: 2^46 * 2 * 4 bytes is not what the file holds.
    yield case("shard_header_larger_than_file", "inconsistent block layout",
               shard=shard_bytes(VALUES, 1, 16, elems=2 ** 46), tensors=[("w", [2 ** 46], 2 ** 46)],
               segments=[[0, 0, 2 ** 46]])
    yield case("segment_past_tensor", "outside its tensor", segments=[[0, 2 ** 52, 15]])
    yield case("segment_overflowing_begin_plus_count", "outside its tensor",
               segments=[[0, 10, 2 ** 53 - 4]])
    yield case("shape_not_integer", "not an integer", tensors=[("w", [3, 5.5], 15)])
    yield case("shape_too_large_for_int64", "not an integer", tensors=[("w", [1e300], 15)])
    yield case("global_step_negative", "global_step", manifest_changes={"counters.global_step": -5})
    yield case("loss_scale_zero", "cur_scale", manifest_changes={"loss_scaler.cur_scale": 0})
    yield case("loss_scale_negative", "cur_scale", manifest_changes={"loss_scaler.cur_scale": -1})
    yield case("scheduler_iteration_negative", "last_batch_iteration",
               manifest_changes={"scheduler.last_batch_iteration": -100})
    yield case("scheduler_iteration_huge", "last_batch_iteration",
               manifest_changes={"scheduler.last_batch_iteration": 10 ** 15})
    yield case("block_bytes_disagree", "blocks; the manifest says", manifest_changes={"block_bytes": 32})
    yield case("block_bytes_zero", "block_bytes", manifest_changes={"block_bytes": 0})
    yield case("world_size_huge", "world_size", manifest_changes={"world_size": 2 ** 40})
    yield case("trailing_garbage", "after its JSON object", text_suffix="garbage")
    yield case("header_padding_flipped", "is not zero", shard=shard_bytes(VALUES, 1, 16, padding=1000))


def main():
    out = sys.argv[1]
    corpus = sys.argv[2] if len(sys.argv) > 2 else None
    if os.path.isdir(out):
        shutil.rmtree(out)
    for name, expect, text, shard in cases():
        d = os.path.join(out, name)
        os.makedirs(d)
        with open(os.path.join(d, "manifest.json"), "wb") as f:
            f.write(text)
        with open(os.path.join(d, "manifest.crc32c"), "w") as f:
            f.write("crc32c %08x bytes %d\n" % (crc32c(text), len(text)))
        with open(os.path.join(d, "zero_rank_00000.shard"), "wb") as f:
            f.write(shard)
        with open(os.path.join(d, "expect"), "w") as f:
            f.write(expect + "\n")
        if corpus:
            # The fuzzer recomputes the shard's checksums and fills these in, so that mutated
            # inputs get past the checksums.
            m = json.loads(text.decode().split("\n}\n")[0] + "\n}") if name != "trailing_garbage" else None
            fuzz_text = text
            if m is not None:
                shard_entry = m["shards"][0]
                fuzz_text = text.replace(b'"table_crc32c": "%s"' % shard_entry["table_crc32c"].encode(),
                                         b'"table_crc32c": "@TABLE@"')
                fuzz_text = fuzz_text.replace(b'"bytes": %d' % shard_entry["bytes"], b'"bytes": @BYTES@')
            os.makedirs(corpus, exist_ok=True)
            with open(os.path.join(corpus, name), "wb") as f:
                f.write(struct.pack("<I", len(fuzz_text)) + fuzz_text + shard)


if __name__ == "__main__":
    main()
