#!/usr/bin/env python3
"""Checks that hone's dataset files are what Megatron-LM and mosaicml-streaming expect.

Runs hone's formats_compat_writer, then, for every dataset it wrote:
  * rebuilds the bytes that Megatron's _IndexWriter/IndexedDatasetBuilder and
    streaming's MDSWriter would write for the same content, and compares them with
    hone's files byte for byte;
  * reads hone's files the way Megatron's _IndexReader/_MMapBinReader and streaming's
    MDSReader do (numpy.memmap/frombuffer, offsets, NDArray decoding, xxh64 hashes).
Needs only numpy (and the zstd CLI for compressed shards). Exit 77 means skipped.

Usage: check_compat.py WRITER_EXECUTABLE WORK_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

SKIP = 77
try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed (Debian: python3-numpy)")
    sys.exit(SKIP)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)
    return condition


# --- xxh64 (python-xxhash's xxh64().hexdigest()), written out because xxhash is not in Debian's python3 ---

M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M64, 31) * P1) & M64


def xxh64_hex(data):
    n, i = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for k in range(4):
            h = ((h ^ _round(0, v[k])) * P1 + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i:i + 8], "little")), 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((int.from_bytes(data[i:i + 4], "little") * P1) & M64), 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * P5) & M64), 11) * P1) & M64
        i += 1
    h = ((h ^ (h >> 33)) * P2) & M64
    h = ((h ^ (h >> 29)) * P3) & M64
    return "%016x" % (h ^ (h >> 32))


assert xxh64_hex(b"") == "ef46db3751d8e999"

# --- Megatron-LM (megatron/core/datasets/indexed_dataset.py) ---

MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
                   8: np.uint16}
MEGATRON_CODES = {dtype.__name__: code for code, dtype in MEGATRON_DTYPES.items()}
INDEX_HEADER = b"MMIDIDX\x00\x00"


def megatron_write(spec):
    """The .bin and .idx that IndexedDatasetBuilder.add_document + finalize write."""
    dtype = getattr(np, spec["dtype"])
    data, lengths, document_indices = bytearray(), [], [0]
    for document in spec["documents"]:
        for sequence in document:
            data += np.array(sequence, dtype=dtype).tobytes(order="C")
            lengths.append(len(sequence))
        document_indices.append(len(lengths))
    pointers, pointer = [], 0
    for length in lengths:
        pointers.append(pointer)
        pointer += length * np.dtype(dtype).itemsize
    idx = bytearray(INDEX_HEADER)
    idx += struct.pack("<Q", 1)
    idx += struct.pack("<B", MEGATRON_CODES[spec["dtype"]])
    idx += struct.pack("<Q", len(lengths))
    idx += struct.pack("<Q", len(document_indices))
    idx += np.array(lengths, dtype=np.int32).tobytes(order="C")
    idx += np.array(pointers, dtype=np.int64).tobytes(order="C")
    idx += np.array(document_indices, dtype=np.int64).tobytes(order="C")
    return bytes(data), bytes(idx)


def megatron_read(prefix):
    """Documents as lists of sequences, read as _IndexReader and _MMapBinReader do."""
    with open(prefix + ".idx", "rb") as stream:
        assert stream.read(9) == INDEX_HEADER, "bad header"
        assert struct.unpack("<Q", stream.read(8))[0] == 1, "bad version"
        dtype = MEGATRON_DTYPES[struct.unpack("<B", stream.read(1))[0]]
        sequence_count = struct.unpack("<Q", stream.read(8))[0]
        document_count = struct.unpack("<Q", stream.read(8))[0]
        offset = stream.tell()
    idx = memoryview(np.memmap(prefix + ".idx", mode="r", order="C"))
    lengths = np.frombuffer(idx, dtype=np.int32, count=sequence_count, offset=offset)
    pointers = np.frombuffer(idx, dtype=np.int64, count=sequence_count, offset=offset + lengths.nbytes)
    document_indices = np.frombuffer(idx, dtype=np.int64, count=document_count,
                                     offset=offset + lengths.nbytes + pointers.nbytes)
    bin_buffer = memoryview(np.memmap(prefix + ".bin", mode="r", order="C").data)
    sequences = [np.frombuffer(bin_buffer, dtype=dtype, count=int(lengths[i]), offset=int(pointers[i])).tolist()
                 for i in range(sequence_count)]
    documents = [sequences[document_indices[d]:document_indices[d + 1]] for d in range(document_count - 1)]
    return dtype.__name__, documents


def check_megatron(root, spec):
    failed_before = len(failures)
    prefix = os.path.join(root, spec["prefix"])
    data, idx = megatron_write(spec)
    with open(prefix + ".bin", "rb") as f:
        check(f.read() == data, f"{prefix}.bin differs from what Megatron's builder writes")
    with open(prefix + ".idx", "rb") as f:
        check(f.read() == idx, f"{prefix}.idx differs from what Megatron's _IndexWriter writes")
    dtype, documents = megatron_read(prefix)
    check(dtype == spec["dtype"], f"{prefix}: dtype {dtype}, expected {spec['dtype']}")
    check(documents == spec["documents"], f"{prefix}: Megatron's reader sees other documents")
    if len(failures) == failed_before:
        print(f"ok: {spec['prefix']} ({dtype}, {len(documents)} documents, "
              f"{sum(map(len, documents))} sequences) equals Megatron's bytes and reads back")


# --- mosaicml-streaming MDS (streaming/base/format/{base,mds}/writer.py, reader.py, encodings.py) ---

SHAPE_DTYPES = ["uint8", "uint16", "uint32", "uint64"]


def ndarray_encode(values, dtype):
    """NDArray(dtype).encode: static dtype, dynamic shape."""
    array = np.array(values, dtype=dtype)
    assert array.size > 0
    shape = np.array(array.shape, np.int64)
    top = shape.max()
    shape_dtype = 0 if top < 1 << 8 else 1 if top < 1 << 16 else 2 if top < 1 << 32 else 3
    return (bytes([(len(array.shape) << 2) | shape_dtype]) + shape.astype(SHAPE_DTYPES[shape_dtype]).tobytes()
            + array.tobytes())


def ndarray_decode(data, dtype):
    """NDArray(dtype).decode."""
    byte = data[0]
    ndim, shape_dtype = byte >> 2, byte % 4
    size = ndim * 2 ** shape_dtype
    shape = np.frombuffer(data[1:1 + size], SHAPE_DTYPES[shape_dtype])
    return np.frombuffer(data[1 + size:], dtype).reshape(shape)


def mds_encode(encoding, value):
    if encoding.startswith("ndarray:"):
        return ndarray_encode(value, encoding.split(":")[1])
    if encoding == "str":
        return value.encode("utf-8")
    assert encoding == "int"
    return np.int64(value).tobytes()


def mds_decode(encoding, data):
    if encoding.startswith("ndarray:"):
        return ndarray_decode(data, encoding.split(":")[1]).tolist()
    if encoding == "str":
        return data.decode("utf-8")
    assert encoding == "int"
    return int(np.frombuffer(data, np.int64)[0])


def mds_write(spec):
    """The shard bytes and index entries (less the compressed data) of MDSWriter."""
    columns = dict(spec["extra_columns"], tokens=spec["tokens_encoding"])
    names = sorted(columns)
    encodings = [columns[name] for name in names]
    sizes = [8 if encoding == "int" else None for encoding in encodings]
    config = {"version": 2, "format": "mds", "compression": spec["compression"], "hashes": spec["hashes"],
              "size_limit": spec["size_limit"], "column_names": names, "column_encodings": encodings,
              "column_sizes": sizes}
    config_data = json.dumps(config, sort_keys=True).encode("utf-8")
    shards, samples, shard_size = [], [], 4 + 4 + len(config_data)

    def flush():
        num_samples = np.uint32(len(samples))
        offsets = np.array([0] + list(map(len, samples))).cumsum().astype(np.uint32)
        offsets += len(num_samples.tobytes()) + len(offsets.tobytes()) + len(config_data)
        shards.append((len(samples), num_samples.tobytes() + offsets.tobytes() + config_data + b"".join(samples)))

    for sample in spec["samples"]:
        head, body = [], []
        for name, encoding, size in zip(names, encodings, sizes):
            datum = mds_encode(encoding, sample[name])
            if size is None:
                head.append(len(datum))
            body.append(datum)
        data = np.array(head, np.uint32).tobytes() + b"".join(body)
        # streaming flushes when the limit would be passed; it would also flush an empty
        # shard if a first sample alone passed it, which hone does not (no case here).
        if spec["size_limit"] and spec["size_limit"] < shard_size + len(data) + 4 and samples:
            flush()
            samples, shard_size = [], 4 + 4 + len(config_data)
        samples.append(data)
        shard_size += len(data) + 4
    if samples:
        flush()
    return config, shards


def file_info(basename, data, hashes):
    return {"basename": basename, "bytes": len(data), "hashes": {h: xxh64_hex(data) for h in hashes}}


def decompress(path):
    return subprocess.run(["zstd", "-q", "-d", "-c", path], check=True, stdout=subprocess.PIPE).stdout


def check_mds(root, spec):
    folder = os.path.join(root, spec["dir"])
    if spec["compression"] and not shutil.which("zstd"):
        print(f"NOTE: {spec['dir']}: the zstd CLI is missing; compressed shards are checked by the C++ tests only")
        return
    failed_before = len(failures)
    config, shards = mds_write(spec)
    entries = []
    for number, (count, raw) in enumerate(shards):
        basename = f"shard.{number:05}.mds"
        entry = dict(config, samples=count, raw_data=file_info(basename, raw, spec["hashes"]), zip_data=None)
        if spec["compression"]:
            zip_basename = basename + ".zstd"
            with open(os.path.join(folder, zip_basename), "rb") as f:
                entry["zip_data"] = file_info(zip_basename, f.read(), spec["hashes"])
            actual = decompress(os.path.join(folder, zip_basename))
        else:
            with open(os.path.join(folder, basename), "rb") as f:
                actual = f.read()
        check(actual == raw, f"{folder}/{basename} differs from what streaming's MDSWriter writes")
        entries.append(entry)
    expected_index = json.dumps({"version": 2, "shards": entries}, sort_keys=True).encode("utf-8")
    with open(os.path.join(folder, "index.json"), "rb") as f:
        check(f.read() == expected_index, f"{folder}/index.json differs from what streaming's MDSWriter writes")

    # Read back as StreamingDataset/MDSReader would: index.json, hashes, offsets, columns.
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    assert index["version"] == 2
    samples = []
    for shard in index["shards"]:
        assert shard["version"] == 2 and shard["format"] == "mds"
        info = shard["zip_data"] or shard["raw_data"]
        path = os.path.join(folder, info["basename"])
        with open(path, "rb") as f:
            stored = f.read()
        for algo, digest in info["hashes"].items():
            check(algo == "xxh64" and xxh64_hex(stored) == digest, f"{path}: {algo} hash mismatch")
        raw = decompress(path) if shard["zip_data"] else stored
        check(len(raw) == shard["raw_data"]["bytes"], f"{path}: raw size differs from raw_data.bytes")
        for idx in range(shard["samples"]):
            begin, end = np.frombuffer(raw[(1 + idx) * 4:(1 + idx) * 4 + 8], np.uint32)
            data = raw[begin:end]
            sizes, pos = [], 0
            for size in shard["column_sizes"]:
                if size:
                    sizes.append(size)
                else:
                    sizes.append(int(np.frombuffer(data[pos:pos + 4], np.uint32)[0]))
                    pos += 4
            sample = {}
            for name, encoding, size in zip(shard["column_names"], shard["column_encodings"], sizes):
                sample[name] = mds_decode(encoding, data[pos:pos + size])
                pos += size
            samples.append(sample)
    check(samples == spec["samples"], f"{folder}: streaming's reader sees other samples")
    if len(failures) == failed_before:
        print(f"ok: {spec['dir']} ({len(index['shards'])} shards, {len(samples)} samples, "
              f"compression {spec['compression']}) equals streaming's bytes and reads back")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    writer, root = sys.argv[1:]
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run([writer, root], check=True)
    with open(os.path.join(root, "expected.json")) as f:
        expected = json.load(f)
    for spec in expected["megatron"]:
        check_megatron(root, spec)
    for spec in expected["mds"]:
        check_mds(root, spec)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()
