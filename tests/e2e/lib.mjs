// lib.mjs: what the e2e tests share: the server run.sh started (QUILL_URL), an openai client for it,
// starting extra servers with other flags (QUILL_BINARY, QUILL_MODEL), and small helpers.
import { spawn } from 'node:child_process';
import net from 'node:net';
import OpenAI from 'openai';

export const URL = process.env.QUILL_URL ?? 'http://127.0.0.1:8080';
export const BINARY = process.env.QUILL_BINARY;
export const MODEL = process.env.QUILL_MODEL;

export function client(url = URL) {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export async function waitHealthy(url, ms = 60_000) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.ok) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not become healthy`);
}

// Starts `quill serve MODEL --port P ...args`; returns {url, proc, log(), stop()}. stop() sends
// SIGTERM and resolves with the exit code.
export async function startServer(args = []) {
  if (!BINARY) throw new Error('QUILL_BINARY is not set (run through run.sh)');
  const port = await freePort();
  const argv = ['serve', ...(MODEL ? [MODEL] : []), '--host', '127.0.0.1', '--port', String(port), ...args];
  const proc = spawn(BINARY, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url);
  return {
    url,
    proc,
    log: () => log,
    stop: async () => { proc.kill('SIGTERM'); return exited; },
  };
}

export async function post(path, body, url = URL) {
  const r = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Streams a request through the openai client; returns {text, reasoning, chunks, finish, usage, hash}.
export async function collect(stream) {
  const out = { text: '', reasoning: '', chunks: [], finish: null, usage: null, hash: null };
  for await (const c of stream) {
    out.chunks.push(c);
    if (c.quill) out.hash = c.quill.completion_hash;
    if (c.usage) out.usage = c.usage;
    const ch = c.choices?.[0];
    if (!ch) continue;
    if (ch.finish_reason) out.finish = ch.finish_reason;
    if (ch.delta) {
      out.text += ch.delta.content ?? '';
      out.reasoning += ch.delta.reasoning_content ?? '';
    } else {
      out.text += ch.text ?? '';
    }
  }
  return out;
}

export async function metric(name, url = URL) {
  const t = await (await fetch(`${url}/metrics`)).text();
  const m = t.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
