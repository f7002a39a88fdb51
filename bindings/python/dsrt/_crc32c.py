"""CRC-32C (Castagnoli), the checksum of dsrt's checkpoint files, in numpy.

A message is cut into 256-byte chunks whose raw CRC registers are computed together (4 bytes per
step, vectorized over every chunk), then folded in order: register(A + B) = shift(register(A),
len B) ^ register(B), where shift (running 256 zero bytes through the register) is linear and so
four byte-indexed tables. Many equal-length blocks (a shard's 1 MiB blocks) fold together too."""

import numpy as np

_POLY = 0x82F63B78  # reflected Castagnoli polynomial
_CHUNK = 256


def _byte_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_T0 = _byte_table()


def _slice_tables():
    t = [np.array(_T0, dtype=np.uint32)]
    for _ in range(3):
        prev = t[-1]
        t.append((prev >> np.uint32(8)) ^ t[0][prev & np.uint32(0xFF)])
    return t


_T = _slice_tables()


def _shift_tables(nbytes):
    """Tables of the linear map 'run nbytes zero bytes through the register'."""
    images = []
    for bit in range(32):
        c = 1 << bit
        for _ in range(nbytes):
            c = (c >> 8) ^ _T0[c & 0xFF]
        images.append(c)
    tables = np.zeros((4, 256), dtype=np.uint32)
    for k in range(4):
        for b in range(256):
            v = 0
            for i in range(8):
                if b >> i & 1:
                    v ^= images[8 * k + i]
            tables[k, b] = v
    return tables


_SHIFT = _shift_tables(_CHUNK)


def _registers(words):
    """Raw registers (start 0, no final xor) of each row of a uint32 [rows, n] array."""
    crc = np.zeros(words.shape[0], dtype=np.uint32)
    t0, t1, t2, t3 = _T
    m = np.uint32(0xFF)
    for j in range(words.shape[1]):
        x = crc ^ words[:, j]
        crc = t3[x & m] ^ t2[(x >> np.uint32(8)) & m] ^ t1[(x >> np.uint32(16)) & m] ^ t0[x >> np.uint32(24)]
    return crc


def _shift(crc):
    m = np.uint32(0xFF)
    s = _SHIFT
    return s[0][crc & m] ^ s[1][(crc >> np.uint32(8)) & m] ^ s[2][(crc >> np.uint32(16)) & m] ^ s[3][crc >> np.uint32(24)]


def _update_bytes(crc, data):
    for b in bytes(data):
        crc = (crc >> 8) ^ _T0[(crc ^ b) & 0xFF]
    return crc


def crc32c_blocks(data, block_bytes):
    """CRC-32C of each block_bytes-long block of data (bytes-like), the last one possibly shorter."""
    buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    n = buf.size
    full = n // block_bytes if block_bytes % _CHUNK == 0 else 0
    out = []
    if full:
        chunks = block_bytes // _CHUNK
        words = buf[:full * block_bytes].view("<u4").reshape(full * chunks, _CHUNK // 4)
        regs = _registers(words.astype(np.uint32, copy=False)).reshape(full, chunks)
        crc = np.full(full, 0xFFFFFFFF, dtype=np.uint32)
        for c in range(chunks):
            crc = _shift(crc) ^ regs[:, c]
        out = [int(v) ^ 0xFFFFFFFF for v in crc]
    start = full * block_bytes
    while start < n:
        out.append(crc32c(buf[start:start + block_bytes]))
        start += block_bytes
    return out


def crc32c(data):
    """CRC-32C of a bytes-like object (crc32c(b"123456789") == 0xE3069283)."""
    buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8) if not isinstance(data, np.ndarray) else \
        data.reshape(-1).view(np.uint8)
    n = buf.size
    chunks = n // _CHUNK
    crc = 0xFFFFFFFF
    if chunks:
        words = buf[:chunks * _CHUNK].view("<u4").reshape(chunks, _CHUNK // 4).astype(np.uint32, copy=False)
        regs = _registers(words)
        s = _SHIFT
        for r in regs.tolist():
            crc = int(s[0][crc & 0xFF] ^ s[1][(crc >> 8) & 0xFF] ^ s[2][(crc >> 16) & 0xFF] ^ s[3][crc >> 24]) ^ r
    crc = _update_bytes(crc, buf[chunks * _CHUNK:].tobytes())
    return crc ^ 0xFFFFFFFF
