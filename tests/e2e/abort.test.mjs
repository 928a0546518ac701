// abort.test.mjs: a client that aborts a stream mid-reply (AbortController) frees its slot at the next
// round, while two other streams running beside it finish with exactly their solo tokens.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { client, collect, metric, sleep } from './lib.mjs';

const oa = client();
const body = (prompt, n) => ({ model: 'x', prompt, max_tokens: n, temperature: 0, ignore_eos: true });

test('aborting one stream leaves the others unchanged and frees the slot', async () => {
  const soloB = await oa.completions.create(body('The second story begins', 96));
  const soloC = await oa.completions.create(body('A third, different prompt', 96));

  const ac = new AbortController();
  const a = (async () => {
    const stream = await oa.completions.create({ ...body('This one will be cut off', 3000), stream: true },
      { signal: ac.signal });
    let n = 0, finish = null;
    try {
      for await (const c of stream) {
        finish = c.choices[0]?.finish_reason ?? finish;
        if ((c.choices[0]?.text ?? '').length > 0 && ++n === 5) ac.abort();
      }
    } catch (e) {
      return e.name;
    }
    // the openai client ends the iteration quietly on abort: no final chunk must have come
    return finish === null ? 'aborted' : 'finished';
  })();
  await sleep(20);
  const b = collect(await oa.completions.create({ ...body('The second story begins', 96), stream: true }));
  const c = collect(await oa.completions.create({ ...body('A third, different prompt', 96), stream: true }));
  const [ra, rb, rc] = await Promise.all([a, b, c]);
  assert.notEqual(ra, 'finished');
  assert.equal(rb.hash, soloB.quill.completion_hash);
  assert.equal(rb.text, soloB.choices[0].text);
  assert.equal(rc.hash, soloC.quill.completion_hash);

  // The aborted stream (3000 tokens asked) must not keep its slot.
  let running = NaN;
  for (let i = 0; i < 100; i++) {
    running = await metric('quill_streams_running');
    if (running === 0) break;
    await sleep(50);
  }
  assert.equal(running, 0);
  const after = await oa.completions.create(body('The second story begins', 96));
  assert.equal(after.quill.completion_hash, soloB.quill.completion_hash);
});

test('aborting a non-streamed request frees its slot too', async () => {
  const ac = new AbortController();
  const p = oa.completions.create(body('A long one', 3000), { signal: ac.signal });
  await sleep(150);
  ac.abort();
  await assert.rejects(p);
  let running = NaN;
  for (let i = 0; i < 100; i++) {
    running = await metric('quill_streams_running');
    if (running === 0) break;
    await sleep(50);
  }
  assert.equal(running, 0);
});
