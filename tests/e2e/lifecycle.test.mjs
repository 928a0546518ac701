// lifecycle.test.mjs: servers with their own flags: a full queue answers 503 with Retry-After, and
// SIGTERM during a stream ends it cleanly (the client sees the end) and the server exits 0.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { client, metric, post, sleep, startServer } from './lib.mjs';

test('queue full -> 503 with Retry-After; the server serves again once slots free', async () => {
  const srv = await startServer(['--parallel', '1', '--queue', '1']);
  const ac = new AbortController(), ac2 = new AbortController();
  try {
    const long = JSON.stringify({ model: 'x', prompt: 'Busy', max_tokens: 3500, temperature: 0, ignore_eos: true,
      stream: true });
    const open = (signal) => fetch(`${srv.url}/v1/completions`, { method: 'POST', body: long, signal,
      headers: { 'Content-Type': 'application/json' } });
    // The first holds the only slot (its first bytes have come), the second waits in the queue.
    const first = await open(ac.signal);
    assert.equal(first.status, 200);
    const reader = first.body.getReader();
    await reader.read();
    const second = await open(ac2.signal);
    assert.equal(second.status, 200);
    const third = await post('/v1/completions', { model: 'x', prompt: 'One more', max_tokens: 4 }, srv.url);
    assert.equal(third.status, 503, third.text);
    assert.ok(Number(third.headers.get('retry-after')) >= 1);
    assert.equal(third.json.error.type, 'server_error');
    // A queued request whose client goes away leaves the queue without ever taking a slot.
    assert.equal(await metric('quill_streams_waiting', srv.url), 1);
    ac2.abort();
    let waiting = NaN;
    for (let i = 0; i < 100 && waiting !== 0; i++) {
      waiting = await metric('quill_streams_waiting', srv.url);
      if (waiting !== 0) await sleep(50);
    }
    assert.equal(waiting, 0);
    assert.equal(await metric('quill_streams_running', srv.url), 1);
    ac.abort();
    let ok = null;
    for (let i = 0; i < 200 && ok?.status !== 200; i++) {
      ok = await post('/v1/completions', { model: 'x', prompt: 'Free again', max_tokens: 4 }, srv.url);
      if (ok.status !== 200) await sleep(50);
    }
    assert.equal(ok.status, 200, ok.text);
  } finally {
    ac.abort();
    ac2.abort();
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
