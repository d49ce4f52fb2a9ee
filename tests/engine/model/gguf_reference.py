"""Random quantized blocks and llama.cpp's own dequantization of them (its gguf package from
PyPI), for gguf_test's comparison with Saturn's.
  python3 gguf_reference.py OUT_PREFIX
writes OUT_PREFIX.gguf (tensors q8_0, q4_0, q4_K, q6_K of random blocks, each block's f16
scales finite) and OUT_PREFIX.f32 (the four tensors' values, dequantized by gguf.quants, in
that order). Exits 3 without the gguf package or numpy."""
import sys

try:
    import numpy as np
    import gguf
    from gguf import quants
except ImportError:
    sys.exit(3)

T = gguf.GGMLQuantizationType
rng = np.random.default_rng(53)
prefix = sys.argv[1]
w = gguf.GGUFWriter(prefix + ".gguf", "llama")
values = []
for name, qtype, scale_offsets in (("q8_0", T.Q8_0, [0]), ("q4_0", T.Q4_0, [0]),
                                    ("q4_K", T.Q4_K, [0, 2]), ("q6_K", T.Q6_K, [208])):
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = 16
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:  # finite f16 scales in [1/64, 4)
        halves = rng.uniform(1 / 64, 4, size=blocks).astype(np.float16) * rng.choice([-1, 1], blocks)
        raw[:, off:off + 2] = halves.astype(np.float16).view(np.uint8).reshape(blocks, 2)
    raw = raw.reshape(1, blocks * block_bytes)
    w.add_tensor(name, raw, raw_dtype=qtype)  # shape in bytes: 1 row of `blocks` blocks
    values.append(quants.dequantize(raw, qtype).astype(np.float32).reshape(-1))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
np.concatenate(values).tofile(prefix + ".f32")
