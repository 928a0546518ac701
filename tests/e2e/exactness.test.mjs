// exactness.test.mjs: the exactness contract seen from outside: 8 prompts answered one at a time and
// then all at once (run.sh starts the server with --parallel 4, so 4 share each round and 4 wait in
// the queue) give identical completion hashes, greedy and seeded.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { URL, client, startServer } from './lib.mjs';

const oa = client();
const PROMPTS = [
  'The capital of France is', 'def fibonacci(n):', 'Once upon a time', '1, 2, 3, 4,',
  'The quick brown fox jumps over', 'In the beginning', 'Hello, my name is', 'To be or not to be,',
];
const req = (p, i) => (i % 2 === 0
  ? { model: 'x', prompt: p, max_tokens: 40 + 7 * i, temperature: 0, ignore_eos: true }
  : { model: 'x', messages: [{ role: 'user', content: p }], max_tokens: 40 + 7 * i, temperature: 0.9, top_p: 0.9,
    seed: 100 + i, ignore_eos: true });
const run = (p, i) => (i % 2 === 0 ? oa.completions.create(req(p, i)) : oa.chat.completions.create(req(p, i)));
// The first 4 prompts against the server at url, one at a time and then all at once: the same hashes.
async function aloneThenTogether(url) {
  const oa2 = client(url);
  const go = (p, i) => (i % 2 === 0 ? oa2.completions.create(req(p, i)) : oa2.chat.completions.create(req(p, i)));
  const four = PROMPTS.slice(0, 4);
  const alone = [];
  for (let i = 0; i < four.length; i++) alone.push((await go(four[i], i)).quill.completion_hash);
  const together = await Promise.all(four.map((p, i) => go(p, i)));
  assert.deepEqual(together.map((r) => r.quill.completion_hash), alone);
}

test('8 prompts alone, then all at once: identical token hashes', async () => {
  const alone = [];
  for (let i = 0; i < PROMPTS.length; i++) alone.push((await run(PROMPTS[i], i)).quill.completion_hash);
  const together = await Promise.all(PROMPTS.map((p, i) => run(p, i)));
  assert.deepEqual(together.map((r) => r.quill.completion_hash), alone);
  for (const [i, r] of together.entries()) assert.equal(r.usage.completion_tokens, 40 + 7 * i);
  // And streamed, all at once.
  const streamed = await Promise.all(PROMPTS.map(async (p, i) => {
    const s = i % 2 === 0 ? await oa.completions.create({ ...req(p, i), stream: true })
      : await oa.chat.completions.create({ ...req(p, i), stream: true });
    let hash = null;
    for await (const c of s) if (c.quill) hash = c.quill.completion_hash;
    return hash;
  }));
  assert.deepEqual(streamed, alone);
});

// --kv-type f32 / q8: a server keeping its K/V in f32 (twice the bytes per row of the default, bf16) or in q8
// (8-bit codes and a scale per head: over half of bf16's, 80 against 128 bytes a row on the tiny model's heads
// of 32) says so on /memory and keeps the contract: 4 prompts alone and then together give identical hashes.
for (const type of ['f32', 'q8']) {
  test(`--kv-type ${type}: /memory reports it, alone and together agree`, async () => {
    const bf16 = (await (await fetch(`${URL}/memory`)).json()).kv;
    const srv = await startServer(['--parallel', '4', '--kv-type', type]);
    try {
      const kv = (await (await fetch(`${srv.url}/memory`)).json()).kv;
      assert.equal(bf16.type, 'bf16');
      assert.equal(kv.type, type);
      if (type === 'f32') assert.equal(2 * bf16.bytes_per_row, kv.bytes_per_row);
      else assert.ok(kv.bytes_per_row > bf16.bytes_per_row / 2 && kv.bytes_per_row < 0.7 * bf16.bytes_per_row);
      await aloneThenTogether(srv.url);
    } finally {
      await srv.stop();
    }
  });
}

// --gdn-state-type bf16: a server keeping its GDN recurrent states in bf16 (half the bytes of the default f32; the
// conv windows stay f32) says so on /memory and keeps the contract: 4 prompts alone and then together give identical
// hashes.
test('--gdn-state-type bf16: /memory reports it, alone and together agree', async () => {
  const f32 = await (await fetch(`${URL}/memory`)).json();
  const srv = await startServer(['--parallel', '4', '--gdn-state-type', 'bf16']);
  try {
    const mem = await (await fetch(`${srv.url}/memory`)).json();
    assert.equal(f32.gdn_state_type, 'f32');
    assert.equal(mem.gdn_state_type, 'bf16');
    const perSlot = (m) => m.held.gdn_states / m.slots.length;
    assert.ok(perSlot(mem) > perSlot(f32) / 2 && perSlot(mem) < 0.75 * perSlot(f32));
    await aloneThenTogether(srv.url);
  } finally {
    await srv.stop();
  }
});
