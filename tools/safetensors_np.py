"""A safetensors reader with numpy alone (no safetensors package), shared by tools/train and
tools/goldens: it reads what quill, MLX and the safetensors package write, unpadded headers included.
Scripts in those folders import it after putting tools/ on sys.path."""
import json
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "U32": np.uint32, "I32": np.int32, "I64": np.int64,
       "U8": np.uint8, "BF16": np.uint16}


def read_safetensors(path, dtypes=None):
    """name -> (dtype string, numpy array of the tensor's shape; BF16 comes back as float32). dtypes:
    the dtype strings a caller accepts (None: every one above); any other raises ValueError."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header, base, out = json.loads(data[8:8 + n]), 8 + n, {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt = e["dtype"]
        if dt not in _NP or (dtypes is not None and dt not in dtypes):
            raise ValueError(f"{path}: unexpected dtype {dt} for {name}")
        npdt = np.dtype(_NP[dt]).newbyteorder("<")
        b0, b1 = e["data_offsets"]
        a = np.frombuffer(data, dtype=npdt, count=(b1 - b0) // npdt.itemsize, offset=base + b0)
        if dt == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = (dt, np.array(a).reshape(e["shape"]))
    return out
