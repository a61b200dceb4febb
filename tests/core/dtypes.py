"""NumPy views of every ccl-core dtype, including bfloat16 (carried as uint16 bits with dtype="bfloat16")."""
import numpy as np

DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "bfloat16", "float32", "float64"]
FLOATING = {"float16", "bfloat16", "float32", "float64"}
OPS = ["sum", "prod", "min", "max", "avg"]


def storage(dtype: str):
    return np.uint16 if dtype == "bfloat16" else np.dtype(dtype)


def encode(values, dtype: str) -> np.ndarray:
    """float64 values -> a buffer of `dtype` (bfloat16 truncated from float32; our values are exact)."""
    if dtype == "bfloat16":
        return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(values).astype(storage(dtype))


def decode(buf: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (buf.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return buf.astype(np.float64)


def kw(dtype: str) -> dict:
    """Extra keyword for ccl_core calls: only bfloat16 needs its dtype spelt out."""
    return {"dtype": "bfloat16"} if dtype == "bfloat16" else {}


def rank_values(rank: int, n: int) -> np.ndarray:
    """Small positive integers: exact in every dtype, and products over 4 ranks stay within int8."""
    return (np.arange(n) % 3 + 1 + rank).astype(np.float64)


def reduce_reference(arrays, op: str) -> np.ndarray:
    stack = np.stack(arrays)
    return {"sum": stack.sum(0), "prod": stack.prod(0), "min": stack.min(0), "max": stack.max(0),
            "avg": stack.mean(0)}[op]


def close(got: np.ndarray, want: np.ndarray, dtype: str, op: str = "sum") -> bool:
    if op == "avg" or dtype in ("float16", "bfloat16"):
        return np.allclose(got, want, rtol=1e-2, atol=1e-2)
    return np.array_equal(got, want)
