#!/usr/bin/env python3
"""What comes back from the GPU machine, and putting it in place here.

  pack.py target --work W --out OUT   right after the target trains: W/target/hf (config, tokenizer,
                                      bf16 weights packed with common.pack_bf16_file) + state.json
                                      -> OUT/target.tar.NN (parts of at most 15 MiB)
  pack.py final --work W --out OUT    the drafter (bf16, packed), the 4-bit drafter bundle, goldens,
                                      eval/corpus/token stats, quill's own check; the 4-bit target
                                      bundle too when it fits the limits -> OUT/final.tgz.NN
  pack.py unpack --src DIR --dest D   joins and extracts both archives into D and restores the bf16
                                      safetensors files (exact bytes)
The device returns at most 8 files of at most 16 MiB, 64 MiB in all: pipeline.log and report.md
plus these parts (gzip's CRC and zlib's Adler-32 catch a damaged part on unpacking).
"""
import argparse
import glob
import io
import os
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import log, pack_bf16_file, unpack_bf16_file  # noqa: E402

PART = 15 << 20
MAX_TOTAL = 60 << 20
MAX_FILES = 8


def split_write(data, out, prefix):
    names = []
    for i in range(0, max(1, len(data)), PART):
        name = os.path.join(out, f"{prefix}.{i // PART:02d}")
        with open(name, "wb") as f:
            f.write(data[i:i + PART])
        names.append(name)
    return names


def add_file(tar, path, arc):
    tar.add(path, arcname=arc, recursive=False)


def add_tree(tar, d, arc, skip=()):
    for root, _, files in os.walk(d):
        for fn in sorted(files):
            if fn in skip:
                continue
            p = os.path.join(root, fn)
            add_file(tar, p, os.path.join(arc, os.path.relpath(p, d)))


def pack_target(work, out):
    hf = os.path.join(work, "target", "hf")
    tmp = os.path.join(work, "pack")
    os.makedirs(tmp, exist_ok=True)
    qpk = os.path.join(tmp, "target-model.safetensors.qpk")
    pack_bf16_file(os.path.join(hf, "model.safetensors"), qpk)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        add_tree(tar, hf, "target/hf", skip=("model.safetensors",))
        add_file(tar, qpk, "target/hf/model.safetensors.qpk")
        add_file(tar, os.path.join(work, "target", "state.json"), "target/state.json")
    names = split_write(buf.getvalue(), out, "target.tar")
    log(f"pack: target checkpoint {len(buf.getvalue()) / 2**20:.1f} MiB in {len(names)} parts "
        f"(bf16 weights {os.path.getsize(os.path.join(hf, 'model.safetensors')) / 2**20:.1f} MiB -> "
        f"{os.path.getsize(qpk) / 2**20:.1f} MiB packed)")


def pack_final(work, out):
    used = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out, "*")))
    n_used = len(glob.glob(os.path.join(out, "target.tar.*"))) + 2  # + pipeline.log, report.md
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        dr = os.path.join(work, "drafter")
        if os.path.exists(os.path.join(dr, "model.safetensors")):
            qpk = os.path.join(work, "pack", "drafter-model.safetensors.qpk")
            os.makedirs(os.path.dirname(qpk), exist_ok=True)
            pack_bf16_file(os.path.join(dr, "model.safetensors"), qpk)
            for fn in ("config.json", "state.json"):
                add_file(tar, os.path.join(dr, fn), f"drafter/{fn}")
            add_file(tar, qpk, "drafter/model.safetensors.qpk")
        for sub in ("goldens", "bundle/qwen35-pycoder-dflash"):
            if os.path.isdir(os.path.join(work, sub)):
                add_tree(tar, os.path.join(work, sub), sub)
        for fn in ("eval.json", "corpus/corpus.json", "tok/tokens.json", "stages.tsv", "build.log"):
            if os.path.exists(os.path.join(work, fn)):
                add_file(tar, os.path.join(work, fn), fn)
    data = buf.getvalue()
    bundle = os.path.join(work, "bundle", "qwen35-pycoder")
    if os.path.isdir(bundle):  # the 4-bit target, when it fits (else unpack.sh re-quantizes the bf16)
        b2 = io.BytesIO()
        with tarfile.open(fileobj=b2, mode="w:gz", compresslevel=1) as tar:
            add_tree(tar, bundle, "bundle/qwen35-pycoder")
        parts = -(-len(data) // PART) + -(-len(b2.getvalue()) // PART)
        if used + len(data) + len(b2.getvalue()) <= MAX_TOTAL and n_used + parts <= MAX_FILES:
            split_write(b2.getvalue(), out, "bundle.tgz")
            log(f"pack: 4-bit target bundle included ({len(b2.getvalue()) / 2**20:.1f} MiB)")
        else:
            log("pack: 4-bit target bundle left out (limits); unpack.sh re-quantizes the bf16 checkpoint")
    names = split_write(data, out, "final.tgz")
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out, "*")))
    log(f"pack: final archive {len(data) / 2**20:.1f} MiB in {len(names)} parts; $OUT holds "
        f"{len(os.listdir(out))} files, {total / 2**20:.1f} MiB")


def join_parts(src, prefix):
    parts = sorted(glob.glob(os.path.join(src, f"{prefix}.[0-9][0-9]")))
    return b"".join(open(p, "rb").read() for p in parts) if parts else None


def unpack(src, dest):
    os.makedirs(dest, exist_ok=True)
    found = []
    for prefix, mode in (("target.tar", "r"), ("final.tgz", "r:gz"), ("bundle.tgz", "r:gz")):
        data = join_parts(src, prefix)
        if data is None:
            continue
        with tarfile.open(fileobj=io.BytesIO(data), mode=mode) as tar:
            tar.extractall(dest)
        found.append(prefix)
    for qpk in glob.glob(os.path.join(dest, "**", "*.qpk"), recursive=True):
        unpack_bf16_file(qpk, qpk[:-4])
        os.unlink(qpk)
    log(f"unpack: {', '.join(found) or 'nothing'} into {dest}")
    if "target.tar" not in found:
        sys.exit("unpack: no target.tar.NN parts: the target did not come back")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("target", "final", "unpack"))
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--src")
    ap.add_argument("--dest")
    a = ap.parse_args()
    if a.what == "target":
        pack_target(a.work, a.out)
    elif a.what == "final":
        pack_final(a.work, a.out)
    else:
        unpack(a.src, a.dest)


if __name__ == "__main__":
    main()
