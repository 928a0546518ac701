#!/usr/bin/env python3
"""bench_openai.py: single-stream speed of an OpenAI-compatible server (quill serve, or any other).

For each prompt kind (a chat prompt with thinking off, a code completion) and each temperature (1.0
and 0), runs --reps streamed requests one after another with ignore_eos and --max-tokens, and reports
the median decode tokens/s ((completion_tokens - 1) / (last chunk - first chunk)) and median time to
first token. Python standard library only.

  python3 tools/bench/bench_openai.py --url http://127.0.0.1:8080 --max-tokens 256 --reps 3 [--json out.json]
"""
import argparse
import json
import statistics
import sys
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sse_client import decode_tps, stream_request  # noqa: E402

PROMPTS = {
    "chat": ("/v1/chat/completions", lambda: {
        "messages": [{"role": "user", "content": "Explain how a hash table works, with an example."}],
        "chat_template_kwargs": {"enable_thinking": False}}),
    "code": ("/v1/completions", lambda: {
        "prompt": "# Python: an LRU cache class with get and put, O(1) each\nclass LRUCache:\n"}),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="quill")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--temperatures", default="1.0,0")
    ap.add_argument("--prompts", default="chat,code")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    results = []
    for kind in a.prompts.split(","):
        path, make = PROMPTS[kind]
        for temp in [float(t) for t in a.temperatures.split(",")]:
            tps, ttft = [], []
            for rep in range(a.reps):
                body = dict(make(), model=a.model, max_tokens=a.max_tokens, temperature=temp, seed=rep,
                            ignore_eos=True)
                r = stream_request(a.url, path, body)
                if r["error"]:
                    print(f"{kind} t={temp} rep {rep}: {r['status']} {r['error']}", file=sys.stderr)
                    return 1
                d = decode_tps(r)
                if d:
                    tps.append(d)
                ttft.append(r["t_first"] - r["t_start"] if r["t_first"] else float("nan"))
            row = {"prompt": kind, "temperature": temp, "reps": a.reps, "max_tokens": a.max_tokens,
                   "decode_tps_median": statistics.median(tps) if tps else None,
                   "ttft_s_median": statistics.median(ttft)}
            results.append(row)
            print(f"{kind:5s} temperature {temp:3.1f}: decode {row['decode_tps_median'] or 0:8.1f} tokens/s "
                  f"(median of {len(tps)}), TTFT {row['ttft_s_median'] * 1000:7.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
