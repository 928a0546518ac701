"""sse_client.py: one streamed OpenAI request over http.client (Python standard library only), with the
time of every content chunk. Shared by bench_openai.py and bench_concurrent.py."""
import http.client
import json
import time
import urllib.parse


def stream_request(url, path, body, timeout=600):
    """POSTs body (a dict; "stream": true is forced, with include_usage) to url+path. Returns a dict:
    t_start, t_first, t_last (time.perf_counter seconds of the first and last content chunk),
    chunk_times (every content chunk), usage (the final usage object), finish, hash, status, error."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    body = dict(body, stream=True, stream_options={"include_usage": True})
    out = {"t_start": time.perf_counter(), "t_first": None, "t_last": None, "chunk_times": [],
           "usage": None, "finish": None, "hash": None, "status": None, "error": None}
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out["status"] = resp.status
        if resp.status != 200:
            out["error"] = resp.read().decode("utf-8", "replace")
            return out
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            now = time.perf_counter()
            ev = json.loads(data)
            if "error" in ev:
                out["error"] = ev["error"].get("message")
                break
            if ev.get("quill"):
                out["hash"] = ev["quill"].get("completion_hash")
            if ev.get("usage"):
                out["usage"] = ev["usage"]
            for ch in ev.get("choices") or []:
                if ch.get("finish_reason"):
                    out["finish"] = ch["finish_reason"]
                delta = ch.get("delta") or {}
                text = ch.get("text") or delta.get("content") or delta.get("reasoning_content") or ""
                if text:
                    if out["t_first"] is None:
                        out["t_first"] = now
                    out["t_last"] = now
                    out["chunk_times"].append(now)
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = str(e)
    finally:
        conn.close()
    return out


def decode_tps(r):
    """Decode tokens/s of one reply: (completion_tokens - 1) / (last - first content chunk)."""
    n = (r.get("usage") or {}).get("completion_tokens", 0)
    if n < 2 or r["t_first"] is None or r["t_last"] <= r["t_first"]:
        return None
    return (n - 1) / (r["t_last"] - r["t_first"])


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
