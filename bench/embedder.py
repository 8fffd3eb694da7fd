"""all-MiniLM-L6-v2 in Python: the same `model.onnx` and `tokenizer.json` astra-mcp loads, run with
onnxruntime (the version the binary loads) and HF `tokenizers`, embedded as astra-mcp does (truncation at
256 word pieces, padding to the longest text of the batch, mean pooling over the attention mask, L2
normalisation). Used for the embedding-throughput reference, for precomputing the vectors of bulk-loaded
stores, and for an estimate of a query's own embedding time.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

MAX_TOKENS = 256


class OnnxEmbedder:
    """A session over `model_dir/model.onnx` with the tokenizer from `model_dir/tokenizer.json`."""

    def __init__(self, model_dir: Path, threads: int = 0):
        """Loads tokenizer and model; `threads` = intra-op threads (0 = onnxruntime's default)."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the batch's longest text
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(
            str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.ort_version = ort.__version__

    def embed(self, texts: list[str]) -> np.ndarray:
        """One L2-normalised float32 vector of 384 per text, in one ONNX batch."""
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feeds)[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        return (pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)).astype(np.float32)

    def embed_many(self, texts: list[str], batch: int = 64, progress=None) -> np.ndarray:
        """Embeds any number of texts in batches (sorted by length to cut padding, returned in order)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            out[idx] = self.embed([texts[i] for i in idx])
            if progress:
                progress(min(start + batch, len(order)), len(order))
        return out


def throughput(embedder: OnnxEmbedder, texts: list[str], batch_sizes: list[int], repeats: int,
               sort_by_length: bool = False) -> list[dict]:
    """Texts per second for each batch size: the median and spread over `repeats` passes over `texts`
    (in the given order, or sorted by length to cut padding), after one warm-up batch."""
    if sort_by_length:
        texts = sorted(texts, key=len)
    embedder.embed(texts[: max(batch_sizes)])
    rows = []
    for bs in batch_sizes:
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for start in range(0, len(texts), bs):
                embedder.embed(texts[start:start + bs])
            rates.append(len(texts) / (time.perf_counter() - t0))
        rates.sort()
        rows.append({
            "batch": bs,
            "sorted_by_length": sort_by_length,
            "texts": len(texts),
            "repeats": repeats,
            "texts_per_s_median": round(rates[len(rates) // 2], 1),
            "texts_per_s_min": round(rates[0], 1),
            "texts_per_s_max": round(rates[-1], 1),
        })
    return rows


def query_latency_ms(embedder: OnnxEmbedder, queries: list[str]) -> list[float]:
    """Milliseconds to embed each query alone (batch 1), after one warm-up call."""
    embedder.embed(queries[:1])
    out = []
    for q in queries:
        t0 = time.perf_counter()
        embedder.embed([q])
        out.append((time.perf_counter() - t0) * 1000)
    return out
