// basic.test.mjs: chat and completions, streamed and not, usage, stop strings (also split across
// tokens), seeds, token-id prompts, and the small endpoints, through the official openai client.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { URL, client, collect, post } from './lib.mjs';

const oa = client();
const NO_THINK = { chat_template_kwargs: { enable_thinking: false } };
const PROMPT = 'Once upon a time, the quick brown fox';

test('GET /v1/models, /health, /memory, /metrics; unknown route 404', async () => {
  const models = await oa.models.list();
  assert.equal(models.data.length, 1);
  const id = models.data[0].id;
  assert.ok(id.length > 0);
  assert.equal((await fetch(`${URL}/health`)).status, 200);
  const mem = await (await fetch(`${URL}/memory`)).json();
  assert.ok(mem.held.weights > 0 && mem.held.gdn_states > 0 && mem.held.kv_mapped > 0);
  assert.ok(mem.peak.total >= mem.held.total);
  assert.equal(mem.slots.length, 4);
  assert.equal(mem.kv.grow_rows, 1024); // quill serve's default: K/V grows as used
  const met = await (await fetch(`${URL}/metrics`)).text();
  assert.match(met, /quill_requests_total\{status="200"\}/);
  assert.match(met, /quill_memory_bytes\{kind="kv_mapped"\}/);
  assert.match(met, /quill_time_to_first_token_seconds_bucket/);
  assert.equal((await fetch(`${URL}/v2/nothing`)).status, 404);
});

test('/memory: K/V held grows with a long reply and is given back when it ends', async () => {
  const before = (await (await fetch(`${URL}/memory`)).json()).held.kv_mapped;
  const r = await oa.completions.create({ model: 'm', prompt: 'x '.repeat(600), max_tokens: 600, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 600);
  let mem = await (await fetch(`${URL}/memory`)).json();
  for (let i = 0; i < 50 && mem.held.kv_mapped !== before; i++) { // given back after the round
    await new Promise((res) => setTimeout(res, 20));
    mem = await (await fetch(`${URL}/memory`)).json();
  }
  assert.equal(mem.held.kv_mapped, before);
  assert.ok(mem.peak.kv_mapped > before, 'the slot grew past its first rows while the reply ran');
});

test('chat completion, not streamed: message, usage, finish_reason', async () => {
  const r = await oa.chat.completions.create({
    model: 'x', messages: [{ role: 'user', content: 'Say hi.' }], max_tokens: 12, temperature: 0, ...NO_THINK,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.match(r.quill.completion_hash, /^[0-9a-f]{16}$/);
});

test('chat completion, streamed: same id/created, role first, finish last, include_usage, same tokens', async () => {
  const body = { messages: [{ role: 'user', content: 'Tell a story.' }], max_tokens: 16, temperature: 0,
    ignore_eos: true, model: 'x', ...NO_THINK };
  const whole = await oa.chat.completions.create(body);
  const s = await collect(await oa.chat.completions.create({ ...body, stream: true,
    stream_options: { include_usage: true } }));
  const ids = new Set(s.chunks.map((c) => c.id));
  const created = new Set(s.chunks.map((c) => c.created));
  assert.equal(ids.size, 1);
  assert.equal(created.size, 1);
  assert.equal(s.chunks[0].object, 'chat.completion.chunk');
  assert.equal(s.chunks[0].choices[0].delta.role, 'assistant');
  const withChoices = s.chunks.filter((c) => c.choices.length > 0);
  for (const c of withChoices.slice(0, -1)) assert.equal(c.choices[0].finish_reason, null);
  assert.equal(withChoices.at(-1).choices[0].finish_reason, 'length');
  const last = s.chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 16);
  assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens);
  for (const c of s.chunks.slice(0, -1)) assert.equal(c.usage, null);
  assert.equal(s.text, whole.choices[0].message.content);
  assert.equal(s.hash, whole.quill.completion_hash);
});

test('thinking: reasoning_content when the template opens a think block', async () => {
  const body = { messages: [{ role: 'user', content: 'Think.' }], max_tokens: 8, temperature: 0, ignore_eos: true,
    model: 'x', chat_template_kwargs: { enable_thinking: true } };
  const tok = await post('/tokenize', { messages: body.messages, chat_template_kwargs: body.chat_template_kwargs });
  assert.equal(tok.status, 200);
  const tail = await post('/detokenize', { tokens: tok.json.tokens.slice(-4) });
  const r = await oa.chat.completions.create(body);
  const s = await collect(await oa.chat.completions.create({ ...body, stream: true }));
  assert.equal(s.text, r.choices[0].message.content);
  if (tail.json.prompt.endsWith('<think>\n')) {
    assert.equal(typeof r.choices[0].message.reasoning_content, 'string');
    assert.equal(s.reasoning, r.choices[0].message.reasoning_content);
  }
});

test('completions: text, streamed and not, agree; token-id prompt gives the same reply', async () => {
  const body = { model: 'x', prompt: PROMPT, max_tokens: 20, temperature: 0, ignore_eos: true };
  const r = await oa.completions.create(body);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 20);
  const s = await collect(await oa.completions.create({ ...body, stream: true,
    stream_options: { include_usage: true } }));
  assert.equal(s.text, r.choices[0].text);
  assert.equal(s.hash, r.quill.completion_hash);
  assert.equal(s.usage.completion_tokens, 20);
  assert.equal(s.chunks[0].object, 'text_completion');

  const tok = await post('/tokenize', { prompt: PROMPT });
  assert.equal(tok.status, 200);
  assert.equal(tok.json.count, tok.json.tokens.length);
  assert.ok(tok.json.max_model_len > 0);
  assert.equal(r.usage.prompt_tokens, tok.json.count);
  const back = await post('/detokenize', { tokens: tok.json.tokens });
  assert.equal(back.json.prompt, PROMPT);
  const byIds = await oa.completions.create({ ...body, prompt: tok.json.tokens });
  assert.equal(byIds.quill.completion_hash, r.quill.completion_hash);
  assert.equal(byIds.choices[0].text, r.choices[0].text);
  const nested = await oa.completions.create({ ...body, prompt: [tok.json.tokens] });
  assert.equal(nested.quill.completion_hash, r.quill.completion_hash);
});

test('seeds: the same seed gives the same reply, another seed another one', async () => {
  const body = { model: 'x', prompt: PROMPT, max_tokens: 32, temperature: 1.0, top_p: 0.95, top_k: 50,
    ignore_eos: true };
  const a = await oa.completions.create({ ...body, seed: 1234 });
  const b = await oa.completions.create({ ...body, seed: 1234 });
  const c = await oa.completions.create({ ...body, seed: 4321 });
  assert.equal(a.quill.completion_hash, b.quill.completion_hash);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.quill.completion_hash, c.quill.completion_hash);
  const sa = await collect(await oa.completions.create({ ...body, seed: 1234, stream: true }));
  assert.equal(sa.hash, a.quill.completion_hash);
});

// A stop string made of the last character of one streamed chunk and the first of the next, so it is
// split across tokens.
function splitStop(chunks) {
  const ok = (ch) => ch && /[\x21-\x7e]/.test(ch);
  for (let k = 1; k + 1 < chunks.length; k++) {
    const a = chunks[k].at(-1), b = chunks[k + 1][0];
    if (ok(a) && ok(b)) return a + b;
  }
  return null;
}

test('stop strings: matched text not returned, split across tokens still stops, stream and not', async () => {
  const body = { model: 'x', prompt: PROMPT, max_tokens: 48, temperature: 0, ignore_eos: true };
  const s = await collect(await oa.completions.create({ ...body, stream: true }));
  const pieces = s.chunks.map((c) => c.choices[0]?.text ?? '').filter((t) => t.length > 0);
  const full = pieces.join('');
  const stop = splitStop(pieces);
  assert.ok(stop, `no printable chunk boundary in ${JSON.stringify(pieces)}`);
  const expect = full.slice(0, full.indexOf(stop));
  const r = await oa.completions.create({ ...body, stop: [stop, 'zzzzzzzzzzzz'] });
  assert.equal(r.choices[0].text, expect);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens < 48);
  const rs = await collect(await oa.completions.create({ ...body, stop, stream: true }));
  assert.equal(rs.text, expect);
  assert.equal(rs.finish, 'stop');
  assert.equal(rs.hash, r.quill.completion_hash);
  // A stop string that never occurs changes nothing.
  const none = await oa.completions.create({ ...body, stop: 'qqqqqqqqqqqqqqqq' });
  assert.equal(none.choices[0].text, full);
  assert.equal(none.choices[0].finish_reason, 'length');
});

test('max_completion_tokens and max_tokens; draft:false accepted', async () => {
  const r = await oa.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }],
    max_completion_tokens: 5, temperature: 0, ignore_eos: true, draft: false, ...NO_THINK });
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.choices[0].finish_reason, 'length');
});
