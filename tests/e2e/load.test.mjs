// load.test.mjs: 200 requests from 16 concurrent clients all complete (mixed chat/completions, streamed
// and not), and the counters add up.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { client, metric } from './lib.mjs';

test('200 requests from 16 concurrent clients all complete', async () => {
  const before = await metric('quill_replies_total');
  let next = 0, done = 0;
  const errors = [];
  const worker = async (w) => {
    const oa = client();
    while (next < 200) {
      const i = next++;
      try {
        const n = 4 + (i % 9);
        if (i % 4 === 0) {
          const r = await oa.completions.create({ model: 'x', prompt: `Request ${i} from ${w}`, max_tokens: n,
            temperature: 0.7, seed: i, ignore_eos: true });
          assert.equal(r.usage.completion_tokens, n);
        } else if (i % 4 === 1) {
          const s = await oa.completions.create({ model: 'x', prompt: `Stream ${i}`, max_tokens: n, temperature: 0,
            ignore_eos: true, stream: true, stream_options: { include_usage: true } });
          let usage = null;
          for await (const c of s) if (c.usage) usage = c.usage;
          assert.equal(usage.completion_tokens, n);
        } else if (i % 4 === 2) {
          const r = await oa.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: `Hi ${i}` }],
            max_tokens: n, temperature: 0, ignore_eos: true });
          assert.equal(r.usage.completion_tokens, n);
        } else {
          const s = await oa.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: `Yo ${i}` }],
            max_tokens: n, temperature: 1, seed: i, ignore_eos: true, stream: true });
          let finish = null;
          for await (const c of s) finish = c.choices[0]?.finish_reason ?? finish;
          assert.equal(finish, 'length');
        }
        done++;
      } catch (e) {
        errors.push(`${i}: ${e.message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: 16 }, (_, w) => worker(w)));
  assert.deepEqual(errors, []);
  assert.equal(done, 200);
  assert.equal(await metric('quill_replies_total'), before + 200);
});
