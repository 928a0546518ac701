"""Stand-in for the tokenizers library in tools/train/tests/smoke_local.sh: encodes and decodes
through `quill tokenize` (QUILL_BIN) on an existing tokenizer.json. No training."""
import json
import os
import subprocess
import tempfile
import types

__version__ = "fake (quill tokenize)"


class Tokenizer:
    def __init__(self, path):
        self.path = path
        self.data = json.load(open(path, encoding="utf-8"))
        self.bin = os.environ["QUILL_BIN"]

    @staticmethod
    def from_file(path):
        return Tokenizer(path)

    def encode(self, text):
        with tempfile.NamedTemporaryFile("w", delete=False, encoding="utf-8") as f:
            f.write(text)
        out = subprocess.run([self.bin, "tokenize", self.path, "--file", f.name], capture_output=True, text=True,
                             check=True).stdout
        os.unlink(f.name)
        return types.SimpleNamespace(ids=[int(x) for x in out.split()])

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]

    def decode(self, ids, skip_special_tokens=True):
        args = [self.bin, "tokenize", self.path, "--decode", " ".join(map(str, ids))]
        if skip_special_tokens:
            args.append("--skip-special")
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout

    def token_to_id(self, s):
        return {t["content"]: t["id"] for t in self.data["added_tokens"]}.get(s, self.data["model"]["vocab"].get(s))

    def get_vocab_size(self, with_added_tokens=True):
        ids = set(self.data["model"]["vocab"].values())
        if with_added_tokens:
            ids |= {t["id"] for t in self.data["added_tokens"]}
        return len(ids)
