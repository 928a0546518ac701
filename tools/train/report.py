#!/usr/bin/env python3
"""report.md from a pipeline work directory (or the same layout unpacked here), and the generated
sections of docs/models.md and README.md.

  report.py --work W --out OUT/report.md                  (device_pipeline.sh, after every stage)
  report.py --work D --fill-docs docs/models.md --fill-readme README.md   (unpack.sh)
A generated section sits between `<!-- BEGIN GENERATED: name -->` and `<!-- END GENERATED: name -->`
and is replaced whole; everything else in those files is left alone.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import DRAFTER_NAME, TARGET_NAME  # noqa: E402


def j(work, *path):
    p = os.path.join(work, *path)
    try:
        with open(p, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def size_mb(d):
    if not os.path.isdir(d):
        return None
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs) / 1e6


def fmt(v, spec=".4f"):
    return "n/a" if v is None else format(v, spec)


def results_md(work):
    c, t, ts, ds, ev = (j(work, "corpus", "corpus.json"), j(work, "tok", "tokens.json"),
                        j(work, "target", "state.json"), j(work, "drafter", "state.json"), j(work, "eval.json"))
    out = []
    if c:
        out.append(f"- Corpus: {c.get('train_files')} Python files ({c.get('train_bytes', 0) / 1e6:.0f} MB) of the "
                   f"packages installed on the GPU machine, plus {c.get('chat_samples')} chat-framed \"write a "
                   f"function\" samples ({c.get('chat_bytes', 0) / 1e6:.1f} MB) made from documented functions; "
                   f"{c.get('heldout_files')} files ({c.get('heldout_bytes', 0) / 1e6:.1f} MB) held out by module path.")
    if t:
        out.append(f"- Tokenizer: byte-level BPE, {t.get('n_bpe')} BPE ids + 33 Qwen added tokens (vocabulary "
                   f"{t.get('vocab')}); {t.get('train_tokens', 0) / 1e6:.1f}M training tokens, "
                   f"{t.get('heldout_bytes_per_token', 0):.2f} bytes per token on held-out code.")
    if ts:
        out.append(f"- Target: {ts.get('params', 0) / 1e6:.1f}M parameters, {ts.get('step')} steps of "
                   f"{ts.get('batch')} x {ts.get('seq')} tokens ({ts.get('tokens', 0) / 1e6:.1f}M tokens seen, "
                   f"{ts.get('epochs', 0):.2f} epochs; {ts.get('seconds_this_run')} s in the last run"
                   f"{', resumed from ' + str(ts.get('resumed_from')) if ts.get('resumed_from') else ''}).")
    if ds:
        h = ds.get("history") or [[None] * 5]
        out.append(f"- Drafter: {ds.get('params', 0) / 1e6:.2f}M parameters, {ds.get('step')} steps "
                   f"({ds.get('seconds_this_run')} s), {ds.get('seqs')} windows x {ds.get('anchors')} blocks of "
                   f"{ds.get('block')} per step, trained against the 4-bit target; last top-1 agreement with "
                   f"the target: {fmt(h[-1][3], '.3f')} at block position 1, {fmt(h[-1][4], '.3f')} over the block.")
    if ev or ts:
        out.append("")
        out.append("| held-out code | nats/token | bits/byte |")
        out.append("|---|---|---|")
        if ev.get("heldout_loss_bf16") is not None:
            out.append(f"| target, bf16 | {fmt(ev.get('heldout_loss_bf16'))} | {fmt(ev.get('heldout_bits_per_byte_bf16'), '.3f')} |")
        elif ts.get("heldout_loss_bf16") is not None:
            out.append(f"| target, bf16 (64 windows, at the end of training) | {fmt(ts['heldout_loss_bf16'])} | |")
        if ev.get("heldout_loss_4bit") is not None:
            out.append(f"| target, 4-bit (the bundle) | {fmt(ev.get('heldout_loss_4bit'))} | "
                       f"{fmt(ev.get('heldout_bits_per_byte_4bit'), '.3f')} |")
        if ev.get("heldout_eval_tokens"):
            out.append(f"\n({ev['heldout_eval_tokens']} held-out tokens, windows of 512.)")
    acc = ev.get("acceptance") or {}
    if acc.get("block16") or acc.get("block8"):
        out.append("")
        out.append(f"DFlash acceptance length at temperature 0 (mean tokens per drafting round, the target's "
                   f"correction token included), 4-bit target + 4-bit drafter, {acc.get('prompts')} held-out "
                   f"code prompts of ~{acc.get('prompt_tokens_mean', 0):.0f} tokens, {acc.get('max_new')} new "
                   f"tokens each:\n")
        out.append("| block | mean acceptance length | rounds | drafted output = greedy output |")
        out.append("|---|---|---|---|")
        for b in (8, 16):
            a = acc.get(f"block{b}")
            if a:
                out.append(f"| {b} | {a['mean_acceptance_length']:.2f} | {a['rounds']} | {a['equal_to_greedy']} |")
    sizes = [(n, size_mb(os.path.join(work, "bundle", n))) for n in (TARGET_NAME, DRAFTER_NAME)]
    if any(s for _, s in sizes):
        tot = sum(s or 0 for _, s in sizes)
        out.append("")
        out.append("Bundle sizes (MLX 4-bit, group 64): " + ", ".join(f"`models/{n}` {fmt(s, '.1f')} MB" for n, s in sizes)
                   + f"; together {tot:.1f} MB.")
    return "\n".join(out)


def samples_md(work, limit=None):
    ev = j(work, "eval.json")
    out = []
    for s in (ev.get("samples") or [])[:limit]:  # four backticks: chat answers hold ``` fences
        out.append("````")
        out.append(s["prompt"] + s["completion"])
        out.append("````")
    return "\n".join(out)


def readme_md(work):
    """The README's example: the bundled model's greedy completions of a code prompt and a chat turn."""
    ev = j(work, "eval.json")
    out = []
    for s in ev.get("samples") or []:
        p = s["prompt"]
        if p.startswith("def fibonacci"):
            out += ["```sh", "quill run --prompt $'def fibonacci(n):\\n' -n 96   # greedy; below, the prompt and then what it prints", "```",
                    "", "````python", p + s["completion"].rstrip(), "````", ""]
        elif p.startswith("<|im_start|>user\nWrite a Python function `is_prime"):
            req = p.split("\n", 1)[1].split("<|im_end|>")[0]
            out += ["```sh", f"quill run --chat '{req}' -n 160", "```", "", "````",
                    s["completion"].replace("<|im_end|>", "").rstrip(), "````", ""]
    return "\n".join(out) or "(no samples)"


def stages_md(work):
    p = os.path.join(work, "stages.tsv")
    if not os.path.exists(p):
        return ""
    rows = ["| stage | result | seconds |", "|---|---|---|"]
    for line in open(p, encoding="utf-8"):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 3:
            rows.append(f"| {f[0]} | {f[1]} | {f[2]} |")
    return "\n".join(rows)


def report(work):
    env = j(work, "env.json")
    qc = j(work, "goldens", "quill_check.json")
    parts = ["# quill demo pair: training report", ""]
    if env:
        parts += [f"Machine: {env.get('gpu', '?')}; python {env.get('python')}, torch {env.get('torch')}, "
                  f"transformers {env.get('transformers')}, tokenizers {env.get('tokenizers')}.", ""]
    parts += ["## Stages", "", stages_md(work), "", "## Results", "", results_md(work), ""]
    if qc:
        parts += ["quill (CPU build) on the goldens: tokenize equal " + str([r.get("tokenize_equal") for r in qc])
                  + ", greedy ids equal " + str([r.get("greedy_equal") for r in qc]), ""]
    hashes = j(work, "goldens", "pycoder", "bundle_sha256.json")
    if hashes:
        parts += [f"Bundle sha256: target `{hashes.get('target_model_sha256')}`, drafter "
                  f"`{hashes.get('drafter_model_sha256')}`", ""]
    parts += ["## Sample completions (4-bit target, greedy)", "", samples_md(work), ""]
    return "\n".join(parts)


def fill(path, name, body):
    text = open(path, encoding="utf-8").read()
    pat = re.compile(rf"(<!-- BEGIN GENERATED: {name} -->\n).*?(<!-- END GENERATED: {name} -->)", re.S)
    if not pat.search(text):
        sys.exit(f"report: {path} has no generated section '{name}'")
    text = pat.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out")
    ap.add_argument("--fill-docs")
    ap.add_argument("--fill-readme")
    a = ap.parse_args()
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(report(a.work))
    if a.fill_docs:
        fill(a.fill_docs, "results", results_md(a.work))
        fill(a.fill_docs, "samples", samples_md(a.work))
        fill(a.fill_docs, "stages", stages_md(a.work))
    if a.fill_readme:
        fill(a.fill_readme, "completion", readme_md(a.work))


if __name__ == "__main__":
    main()
