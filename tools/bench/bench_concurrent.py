#!/usr/bin/env python3
"""bench_concurrent.py: N simultaneous streams against an OpenAI-compatible server, for each N in --levels.

The N requests (distinct prompts, ignore_eos, --max-tokens each) are released together by a barrier.
Reported per level: aggregate tokens/s (all completion tokens / [first token of any stream, last token
of any stream]), mean per-stream decode tokens/s, TTFT p50/p90/p99 and inter-token latency (gap between
successive content chunks) p50/p90/p99. --alone also runs each prompt by itself first and checks that
every concurrent reply's completion hash ("quill": {"completion_hash"}) equals its solo one (the
exactness contract). Python standard library only; prints a table, and JSON with --json.

  python3 tools/bench/bench_concurrent.py --url http://127.0.0.1:8080 --levels 1,4,16 --max-tokens 128
"""
import argparse
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sse_client import decode_tps, percentile, stream_request  # noqa: E402

TOPICS = ["a lighthouse keeper", "the history of paper", "how compilers work", "a city under the sea",
          "sorting algorithms", "the water cycle", "a chess endgame", "volcanoes", "a robot learning to paint",
          "the printing press", "black holes", "a mountain village", "bread baking", "the internet", "tides",
          "a detective story"]


def body(i, a):
    b = {"model": a.model, "max_tokens": a.max_tokens, "temperature": a.temperature, "seed": i,
         "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False},
         "messages": [{"role": "user", "content": f"Write about {TOPICS[i % len(TOPICS)]} (#{i})."}]}
    if a.top_p is not None:
        b["top_p"] = a.top_p
    if a.top_k is not None:
        b["top_k"] = a.top_k
    return b


def run_level(n, a):
    barrier = threading.Barrier(n)
    results = [None] * n

    def worker(i):
        barrier.wait()
        results[i] = stream_request(a.url, "/v1/chat/completions", body(i, a))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def summarize(n, results):
    ok = [r for r in results if not r["error"] and r["t_first"] is not None]
    errors = [f"{r['status']} {r['error']}" for r in results if r["error"]]
    tokens = sum((r["usage"] or {}).get("completion_tokens", 0) for r in ok)
    t0 = min((r["t_first"] for r in ok), default=0)
    t1 = max((r["t_last"] for r in ok), default=0)
    ttft = [r["t_first"] - r["t_start"] for r in ok]
    itl = [b - a for r in ok for a, b in zip(r["chunk_times"], r["chunk_times"][1:])]
    per = [d for d in (decode_tps(r) for r in ok) if d]
    ms = lambda x: None if x is None else x * 1000.0  # noqa: E731
    return {"streams": n, "ok": len(ok), "errors": errors, "completion_tokens": tokens,
            "aggregate_tps": tokens / (t1 - t0) if t1 > t0 else None,
            "per_stream_tps_mean": sum(per) / len(per) if per else None,
            "ttft_ms": {p: ms(percentile(ttft, p)) for p in (50, 90, 99)},
            "itl_ms": {p: ms(percentile(itl, p)) for p in (50, 90, 99)}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="quill")
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, help="sent as top_p where given")
    ap.add_argument("--top-k", type=int, help="sent as top_k (vLLM's extension) where given")
    ap.add_argument("--alone", action="store_true", help="check each concurrent hash against a solo run")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    solo = {}
    if a.alone:
        for i in range(max(levels)):
            solo[i] = stream_request(a.url, "/v1/chat/completions", body(i, a))["hash"]
    rows, bad = [], 0
    print(f"{'streams':>7} {'agg tok/s':>10} {'per-stream':>10} {'TTFT p50/p90/p99 ms':>24} {'ITL p50/p90/p99 ms':>24}")
    for n in levels:
        res = run_level(n, a)
        row = summarize(n, res)
        if a.alone:
            row["hash_mismatches"] = [i for i, r in enumerate(res) if r["hash"] != solo[i]]
            bad += len(row["hash_mismatches"])
        rows.append(row)
        f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        t, it = row["ttft_ms"], row["itl_ms"]
        print(f"{n:7d} {f(row['aggregate_tps']):>10} {f(row['per_stream_tps_mean']):>10} "
              f"{f(t[50]) + '/' + f(t[90]) + '/' + f(t[99]):>24} {f(it[50]) + '/' + f(it[90]) + '/' + f(it[99]):>24}"
              + (f"  errors: {len(row['errors'])}" if row["errors"] else "")
              + (f"  hash mismatches: {row['hash_mismatches']}" if a.alone and row["hash_mismatches"] else ""))
        bad += len(row["errors"])
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
