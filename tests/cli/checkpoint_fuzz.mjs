// checkpoint_fuzz.mjs QUILL_BINARY SOURCE_DIR: a seeded fuzz of the checkpoint loader. Each case copies
// models/qwen35-tiny, damages one file (model.safetensors' header or bytes, config.json, tokenizer.json or
// tokenizer_config.json: bytes flipped, cut short, a field deleted or given a strange value), then runs
// `quill run DIR --prompt-ids 1,2,3 -n 2`, `quill inspect DIR`, `quill tokenize DIR TEXT` and `quill run DIR --chat
// hello -n 2`. Each must either succeed or exit 1 with a
// message on stderr naming the damaged file; never a signal, a hang, or a sanitizer report (the ASan build
// runs this too). CKPT_FUZZ_SEED and CKPT_FUZZ_COUNT pick the cases (default seed 11, 120 cases).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [quill, src] = process.argv.slice(2);
const seed = Number(process.env.CKPT_FUZZ_SEED ?? 11);
const count = Number(process.env.CKPT_FUZZ_COUNT ?? 120);
const model = path.join(src, 'models', 'qwen35-tiny');
const files = fs.readdirSync(model).filter((f) => fs.statSync(path.join(model, f)).isFile());

let state = seed >>> 0 || 1; // xorshift32: the same cases for a seed on every machine
const rand = () => {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state / 4294967296;
};
const pick = (a) => a[Math.floor(rand() * a.length)];
const strange = () => pick([0, -1, 1, 2, 3, 7, 1e9, 2147483648, -2147483649, 1.5, 1e308, 'x', null, [], {}, true]);

// The safetensors header: its 8-byte length, then JSON. Returns the bytes after one damage.
function damageSafetensors(buf) {
  const n = Number(buf.readBigUInt64LE(0));
  const kind = pick(['flip-header', 'flip-data', 'cut', 'length', 'json']);
  const out = Buffer.from(buf);
  if (kind === 'flip-header') {
    for (let k = 0; k < 1 + Math.floor(rand() * 4); k++) out[8 + Math.floor(rand() * n)] ^= 1 << Math.floor(rand() * 8);
  } else if (kind === 'flip-data') {
    out[8 + n + Math.floor(rand() * (buf.length - 8 - n))] ^= 0xff; // a weight's bits: loads, runs, prints
  } else if (kind === 'cut') {
    return out.subarray(0, Math.floor(rand() * buf.length));
  } else if (kind === 'length') {
    out.writeBigUInt64LE(BigInt(pick([0, 1, 7, n - 1, n + 1, buf.length, 2 ** 40])), 0);
  } else {
    const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
    const names = Object.keys(header).filter((k) => k !== '__metadata__');
    const t = header[pick(names)];
    const field = pick(['dtype', 'shape', 'data_offsets', 'delete']);
    if (field === 'delete') delete header[pick(names)];
    else if (field === 'dtype') t.dtype = pick(['F64', 'I8', 'U8', 'BOOL', 'F8_E4M3', '', 'bf16', strange()]);
    else if (field === 'shape')
      t.shape = pick([[], [0], [1, 1, 1, 1, 1], [-1, 4], [2 ** 31, 2], t.shape.map(() => strange())]);
    else t.data_offsets = pick([[0, 0], [5, 1], [0, 2 ** 40], [t.data_offsets[0] + 2, t.data_offsets[1] + 2], 'x']);
    let text = Buffer.from(JSON.stringify(header), 'utf8');
    const pad = Buffer.alloc((8 - (text.length % 8)) % 8, 0x20);
    text = Buffer.concat([text, pad]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(text.length));
    return Buffer.concat([len, text, buf.subarray(8 + n)]);
  }
  return out;
}

// A JSON file: a field at some depth deleted or given a strange value, or the text cut or a byte flipped.
function damageJson(buf) {
  const kind = pick(['field', 'field', 'cut', 'flip']);
  if (kind === 'cut') return buf.subarray(0, Math.floor(rand() * buf.length));
  if (kind === 'flip') {
    const out = Buffer.from(buf);
    out[Math.floor(rand() * out.length)] ^= 1 << Math.floor(rand() * 8);
    return out;
  }
  const doc = JSON.parse(buf.toString('utf8'));
  let node = doc;
  for (let depth = 0; depth < 3; depth++) { // walk down a few levels of objects
    const keys = node && typeof node === 'object' && !Array.isArray(node) ? Object.keys(node) : [];
    const objects = keys.filter((k) => node[k] && typeof node[k] === 'object' && !Array.isArray(node[k]));
    if (!objects.length || rand() < 0.4) break;
    node = node[pick(objects)];
  }
  if (node && typeof node === 'object') {
    const keys = Object.keys(node);
    if (keys.length) {
      const k = pick(keys);
      if (rand() < 0.3) delete node[k];
      else node[k] = strange();
    }
  }
  return Buffer.from(JSON.stringify(doc), 'utf8');
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'quill-ckpt-fuzz-'));
let failures = 0, refused = 0, loaded = 0;
const fail = (msg) => { failures++; console.error(`FAIL: ${msg}`); };
try {
  for (let c = 0; c < count; c++) {
    const dir = path.join(tmp, `case${c}`);
    fs.mkdirSync(dir);
    for (const f of files) fs.copyFileSync(path.join(model, f), path.join(dir, f));
    const file = pick(files);
    const before = fs.readFileSync(path.join(dir, file));
    const after = file.endsWith('.safetensors') ? damageSafetensors(before) : damageJson(before);
    fs.writeFileSync(path.join(dir, file), after);
    const commands = [
      ['run', dir, '--prompt-ids', '1,2,3', '-n', '2', '--threads', '2'],
      ['inspect', dir],
      ['tokenize', dir, 'def f(x):\n    return x'], // tokenizer.json
      ['run', dir, '--chat', 'hello', '-n', '2', '--threads', '2'], // and the chat template
    ];
    for (const args of commands) {
      const r = spawnSync(quill, args, { encoding: 'utf8', timeout: 120000 });
      const what = `case ${c} (seed ${seed}, ${file} damaged), quill ${args[0]}`;
      if (r.error || r.signal) fail(`${what}: ${r.error ? r.error.message : 'signal ' + r.signal}\n${r.stderr}`);
      else if (/Sanitizer|runtime error/.test(r.stderr)) fail(`${what}: sanitizer report\n${r.stderr}`);
      else if (r.status === 0) loaded++;
      else if (r.status !== 1) fail(`${what}: exit ${r.status} (want 0 or 1)\n${r.stderr}`);
      else if (!r.stderr.includes(file)) fail(`${what}: the message does not name ${file}: ${r.stderr.trim()}`);
      else refused++;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log(`checkpoint fuzz (seed ${seed}, ${count} cases): ${refused} refused naming the file, ${loaded} loaded, ` +
            `${failures} failures`);
process.exit(failures ? 1 : 0);
