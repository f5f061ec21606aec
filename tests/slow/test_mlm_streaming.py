"""A corpus much larger than the memory it is read with: RSS stays bounded (memory-mapped Arrow)."""

import json
import random
import subprocess
import sys

import pytest

from tests.samples import MLM_WORDS

SCRIPT = """
import json, sys, threading, time
from encoder_tasks.tasks.mlm.text import make_blocks, read_split
from encoder_tasks.testing import make_tiny_tokenizer

def anon_mib():  # anonymous memory only: memory-mapped file pages are page cache, not the heap
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
peak, done = [0.0], []
def watch():
    while not done:
        peak[0] = max(peak[0], anon_mib())
        time.sleep(0.02)
tok = make_tiny_tokenizer()
base = anon_mib()
threading.Thread(target=watch, daemon=True).start()
docs = read_split(sys.argv[1])
blocks = make_blocks(docs, tok, max_length=128)
tokens = 0
for batch in blocks.select_columns(["length"]).iter(batch_size=10000):
    tokens += sum(batch["length"])
done.append(1)
time.sleep(0.05)
print(json.dumps({"docs": len(docs), "blocks": len(blocks), "tokens": tokens,
                  "heap_growth_mib": peak[0] - base, "memory_mapped": bool(blocks.cache_files)}))
"""


def measure(path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_large_corpus_streams_with_bounded_memory(tmp_path):
    """Memory is a per-batch constant: four times the corpus costs no more memory."""
    words = MLM_WORDS
    rng = random.Random(0)
    line = " ".join(rng.choice(words) for _ in range(500))  # ~2.3 KB per document
    sizes = {}
    for name, docs in (("small", 5_000), ("large", 20_000)):  # ~11 MB and ~45 MB
        path = tmp_path / f"{name}.txt"
        with path.open("w") as handle:
            for _ in range(docs):
                handle.write(line + "\n")
        sizes[name] = (path.stat().st_size / 2**20, measure(path), docs)
    (small_mib, small, small_docs), (large_mib, large, large_docs) = sizes["small"], sizes["large"]
    assert small["docs"] == small_docs and large["docs"] == large_docs and large["memory_mapped"]
    assert large["tokens"] == pytest.approx(4 * small["tokens"], rel=0.01)  # plus [CLS]/[SEP] per block
    # Held in memory, 34 MB more text would mean far over 100 MB more (token ids, offsets).
    growth = large["heap_growth_mib"] - small["heap_growth_mib"]
    assert growth < (large_mib - small_mib) / 2, (small, large)
