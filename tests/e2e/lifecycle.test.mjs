// lifecycle.test.mjs: servers with their own flags: a full queue answers 503 with Retry-After, and
// SIGTERM during a stream ends it cleanly (the client sees the end) and the server exits 0.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { client, post, sleep, startServer } from './lib.mjs';

test('queue full -> 503 with Retry-After; the queued ones still finish', async () => {
  const srv = await startServer(['--parallel', '1', '--queue', '1']);
  try {
    const long = { model: 'x', prompt: 'Busy', max_tokens: 3500, temperature: 0, ignore_eos: true };
    const first = post('/v1/completions', long, srv.url);
    await sleep(50);
    const second = post('/v1/completions', long, srv.url);
    await sleep(50);
    const third = await post('/v1/completions', long, srv.url);
    assert.equal(third.status, 503, third.text);
    assert.ok(Number(third.headers.get('retry-after')) >= 1);
    assert.ok(third.json.error);
    const [a, b] = await Promise.all([first, second]);
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    assert.equal(a.json.quill.completion_hash, b.json.quill.completion_hash);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('SIGTERM with a stream running: the stream ends, the server exits 0', async () => {
  const srv = await startServer(['--parallel', '2']);
  const oa = client(srv.url);
  const s = await oa.completions.create({ model: 'x', prompt: 'Go on', max_tokens: 3000, temperature: 0,
    ignore_eos: true, stream: true });
  let n = 0, ended = 'no';
  const reading = (async () => {
    try {
      for await (const c of s) n += c.choices?.length ?? 0;
      ended = 'done';
    } catch (e) {
      ended = e.constructor.name;
    }
  })();
  while (n < 3) await sleep(5);
  const code = await srv.stop();
  await reading;
  assert.equal(code, 0);
  assert.notEqual(ended, 'no');
  assert.match(srv.log(), /stopped/);
});
