// fuzz.test.mjs: seeded structural fuzzing of the request parsers. Valid requests to the four POST
// routes are mutated (fields added, replaced, nested or dropped; values of every JSON type, integers
// past 2^63, lone surrogates, NUL, 70 KB strings; a tenth of the bodies with bytes overwritten) and
// sent four at a time, some streamed. Every answer must be a 2xx or 4xx with a body (never a 5xx, a
// dropped connection or a crash), and a greedy reference completion must give the same hash before and
// after, so that nothing the fuzz sent disturbed the server's state. FUZZ_SEED / FUZZ_COUNT override.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { URL } from './lib.mjs';

const SEED = Number(process.env.FUZZ_SEED ?? 7);
const COUNT = Number(process.env.FUZZ_COUNT ?? 1000);

function mulberry32(a) {
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(SEED);
const below = (n) => Math.floor(rand() * n);
const pick = (xs) => xs[below(xs.length)];

const KEYS = ['messages', 'prompt', 'model', 'max_tokens', 'max_completion_tokens', 'n', 'best_of', 'temperature',
  'top_p', 'top_k', 'min_p', 'seed', 'stop', 'stream', 'stream_options', 'include_usage', 'ignore_eos', 'draft',
  'chat_template_kwargs', 'enable_thinking', 'logprobs', 'top_logprobs', 'echo', 'add_special_tokens', 'tokens',
  'content', 'role', 'type', 'text', 'tools', 'tool_choice', 'response_format', 'logit_bias', 'suffix'];

// A number JSON can hold but JavaScript cannot: written into the body as is.
class Raw { constructor(text) { this.text = text; } }
const RAW_NUMBERS = ['18446744073709551616', '-9223372036854775809', '9223372036854775807', '1e999', '-0',
  '4.9e-324', '123456789012345678901234567890', '0.0000000000000000000001'];

function randomString() {
  let s = '';
  for (let n = below(20); n > 0; n--) {
    s += pick([() => String.fromCharCode(32 + below(95)), () => String.fromCharCode(0x80 + below(0x780)),
      () => String.fromCharCode(0xd800 + below(0x800)) /* a lone surrogate */, () => '\u0000',
      () => String.fromCodePoint(0x10000 + below(0xfffff))])();
  }
  return s;
}

function randomValue(depth = 0) {
  const kinds = [() => null, () => true, () => false, () => new Raw(pick(RAW_NUMBERS)),
    () => pick([0, 1, -1, 2, 0.5, 1e308, -1e308, 2 ** 53 + 1, 1e-320]), randomString, () => '',
    () => 'x'.repeat(pick([1, 100, 5000, 70000])),
    () => Array.from({ length: below(50) }, () => below(300_000) - 5)];
  if (depth < 3) {
    kinds.push(() => Array.from({ length: below(4) }, () => randomValue(depth + 1)),
      () => Object.fromEntries(Array.from({ length: below(4) }, () => [pick(KEYS), randomValue(depth + 1)])),
      () => ({ type: 'text', text: randomValue(depth + 1) }),
      () => ({ role: pick(['user', 'system', 'assistant', 'tool', 'x']), content: randomValue(depth + 1) }));
  }
  return pick(kinds)();
}

function mutate(v, depth = 0) {
  if (Array.isArray(v)) {
    const a = [...v];
    if (a.length && rand() < 0.5) { const i = below(a.length); a[i] = mutate(a[i], depth + 1); } else a.push(randomValue());
    return a;
  }
  if (v && typeof v === 'object' && !(v instanceof Raw)) {
    const o = { ...v };
    for (let n = 1 + below(2); n > 0; n--) {
      const keys = Object.keys(o);
      const op = keys.length ? below(4) : 0;
      if (op === 0) o[pick(KEYS)] = randomValue();
      else if (op === 1) o[pick(keys)] = randomValue();
      else if (op === 2) { const k = pick(keys); o[k] = mutate(o[k], depth + 1); } else delete o[pick(keys)];
    }
    return o;
  }
  return randomValue(depth);
}

function toJSON(v) {
  if (v instanceof Raw) return v.text;
  if (Array.isArray(v)) return `[${v.map(toJSON).join(',')}]`;
  if (v && typeof v === 'object') return `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}:${toJSON(x)}`).join(',')}}`;
  return JSON.stringify(v) ?? 'null';
}

const ROUTES = {
  '/v1/chat/completions': () => ({
    messages: Array.from({ length: 1 + below(3) }, () => ({ role: pick(['user', 'system', 'assistant']), content: 'hi there' })),
    temperature: pick([0, 0.7, 1.5]),
  }),
  '/v1/completions': () => ({ prompt: pick(['def f(x):', [1, 2, 3]]) }),
  '/tokenize': () => ({ content: 'hello', add_special_tokens: true }),
  '/detokenize': () => ({ tokens: [1, 2, 3] }),
};

function randomRequest() {
  const path = pick(Object.keys(ROUTES));
  let body = mutate(ROUTES[path]());
  // Most generation requests keep a small max_tokens, so that the run stays short; the rest test the defaults.
  if (path.startsWith('/v1') && body && typeof body === 'object' && !Array.isArray(body) && rand() < 0.95) {
    body.max_tokens = 1 + below(4);
    if (rand() < 0.25) body.stream = true;
  }
  let bytes = Buffer.from(toJSON(body), 'utf8');
  if (rand() < 0.1) for (let n = 1 + below(4); n > 0; n--) bytes[below(bytes.length)] = below(256);
  return { path, bytes };
}

async function send({ path, bytes }) {
  const r = await fetch(`${URL}${path}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: bytes,
    signal: AbortSignal.timeout(60_000),
  });
  return { status: r.status, text: await r.text() };
}

const reference = async () => {
  const r = await send({ path: '/v1/completions',
    bytes: Buffer.from(JSON.stringify({ prompt: 'The capital of France is', max_tokens: 12, temperature: 0 })) });
  assert.equal(r.status, 200, r.text);
  return JSON.parse(r.text).quill.completion_hash;
};

test(`seeded fuzz of the request parsers (seed ${SEED}, ${COUNT} requests): no 5xx, no crash, state undisturbed`, async (t) => {
  const before = await reference();
  const requests = Array.from({ length: COUNT }, randomRequest);
  const seen = {};
  for (let i = 0; i < requests.length; i += 4) {
    const batch = requests.slice(i, i + 4);
    const answers = await Promise.all(batch.map(send));
    for (const [j, a] of answers.entries()) {
      const what = `request ${i + j} ${batch[j].path} ${batch[j].bytes.toString('utf8', 0, 200)}`;
      assert.ok(a.status >= 200 && a.status < 500, `${what} -> ${a.status} ${a.text.slice(0, 300)}`);
      assert.ok(a.text.length > 0, `${what}: empty body`);
      if (a.status >= 400) assert.ok(JSON.parse(a.text).error?.message, `${what}: no error message: ${a.text}`);
      seen[a.status] = (seen[a.status] ?? 0) + 1;
    }
  }
  t.diagnostic(`answers by status: ${JSON.stringify(seen)}`);
  assert.ok(seen[200] > 0 && seen[400] > 0, `the fuzz should reach both outcomes: ${JSON.stringify(seen)}`);
  assert.equal(await reference(), before);
  assert.equal((await fetch(`${URL}/health`)).status, 200);
});
