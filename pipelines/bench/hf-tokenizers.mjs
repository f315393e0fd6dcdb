// hf-tokenizers.mjs: Hugging Face's Rust tokenizers crate, through its Node
// binding (@anush008/tokenizers), timed the way a user calls it, for the
// tokenizer section of BENCHMARKS.md (internal/benchsuite).
//
//   TOKENIZERS_PARALLELISM=false taskset -c 0 node --expose-gc hf-tokenizers.mjs \
//       --modules DIR --golden golden/qwen3.jsonl.gz [--reps 3] [--cold-reps 3] qwen3/tokenizer.json
//
// DIR holds node_modules/@anush008/tokenizers (npm install in DIR, from the
// package.json beside this file). It loads the tokenizer first, in a fresh
// process (load time; peak RSS before and after), then reads the golden
// renderings (each line's "rendered" text, in file order) and encodes,
// without special tokens added (addSpecialTokens: false):
//
//   whole  the renderings concatenated, one encode call (the text go test's
//          BenchmarkEncode gives lib/tokenizer), after one warm-up pass
//   docs   each rendering in an encode call of its own, awaited in turn
//   batch  all the renderings in one encodeBatch call (serial with
//          TOKENIZERS_PARALLELISM=false): the crate's per-document cost
//          without the binding's per-call hop to libuv's thread pool
//   cold   the whole text once on a tokenizer just loaded (empty word cache)
//
// Each mode's figure is the mean of --reps passes (as go test's ns/op is
// the mean of b.N), on one JSON object on stdout. Before timing, every
// document's ids are checked against the golden ids (the reference's own).
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { parseArgs } from 'node:util';

const { values: opts, positionals } = parseArgs({
  options: {
    modules: { type: 'string' },
    golden: { type: 'string' },
    reps: { type: 'string', default: '3' },
    'cold-reps': { type: 'string', default: '3' },
    'floor-calls': { type: 'string', default: '2000' },
  },
  allowPositionals: true,
});
if (!opts.modules || !opts.golden || positionals.length !== 1) {
  console.error('usage: node hf-tokenizers.mjs --modules DIR --golden NAME.jsonl.gz [--reps N] [--cold-reps N] TOKENIZER.json');
  process.exit(2);
}
const reps = Number(opts.reps);
const coldReps = Number(opts['cold-reps']);
const floorCalls = Number(opts['floor-calls']);
const tokenizerFile = positionals[0];

const require = createRequire(join(opts.modules, 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');
const bindingVersion = require('@anush008/tokenizers/package.json').version;

const mb = (kb) => kb / 1024;
const now = () => process.hrtime.bigint();
const seconds = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;
const gc = () => { if (globalThis.gc) globalThis.gc(); };

// Loading, first, in a process that has done nothing else.
const rssBefore = mb(process.resourceUsage().maxRSS);
let t0 = now();
let tok = Tokenizer.fromFile(tokenizerFile);
const loadSeconds = seconds(t0);
const rssPeak = mb(process.resourceUsage().maxRSS);

const lines = gunzipSync(readFileSync(opts.golden)).toString('utf8').split('\n').filter((l) => l !== '');
const docs = [];
const golden = [];
for (const line of lines) {
  const c = JSON.parse(line);
  docs.push(c.rendered);
  golden.push(c.ids);
}
const text = docs.join('');
const bytes = Buffer.byteLength(text, 'utf8');
const noSpecial = { addSpecialTokens: false };

// The binding's answers, checked against the reference's ids.
let goldenTokens = 0;
let mismatches = 0;
for (let i = 0; i < docs.length; i++) {
  const ids = (await tok.encode(docs[i], null, noSpecial)).getIds();
  const want = golden[i];
  goldenTokens += want.length;
  if (ids.length !== want.length || ids.some((v, k) => v !== want[k])) mismatches++;
}

// One mode: a warm-up pass, then the mean of reps passes.
async function timed(pass) {
  let tokens = await pass();
  gc();
  const t = now();
  for (let r = 0; r < reps; r++) tokens = await pass();
  const s = seconds(t) / reps;
  return { seconds: s, mbps: bytes / 1e6 / s, tokens, tok_s: tokens / s, reps };
}

const whole = await timed(async () => (await tok.encode(text, null, noSpecial)).getLength());
const perDoc = await timed(async () => {
  let n = 0;
  for (const d of docs) n += (await tok.encode(d, null, noSpecial)).getLength();
  return n;
});
const batch = await timed(async () => {
  let n = 0;
  for (const e of await tok.encodeBatch(docs, noSpecial)) n += e.getLength();
  return n;
});

// The binding's floor: one encode call of an empty string, awaited.
for (let i = 0; i < 200; i++) await tok.encode('', null, noSpecial);
t0 = now();
for (let i = 0; i < floorCalls; i++) await tok.encode('', null, noSpecial);
const floorUs = (seconds(t0) / floorCalls) * 1e6;

// Cold: the first pass of a tokenizer just loaded (loading not timed).
let coldSeconds = 0;
let coldTokens = 0;
for (let r = 0; r < coldReps; r++) {
  tok = null;
  gc();
  tok = Tokenizer.fromFile(tokenizerFile);
  const t = now();
  coldTokens = (await tok.encode(text, null, noSpecial)).getLength();
  coldSeconds += seconds(t);
}
coldSeconds /= coldReps;

process.stdout.write(JSON.stringify({
  binding: '@anush008/tokenizers ' + bindingVersion,
  node: process.version,
  load: { ms: loadSeconds * 1e3, rss_before_mb: rssBefore, rss_peak_mb: rssPeak },
  bytes,
  documents: docs.length,
  golden_tokens: goldenTokens,
  golden_mismatches: mismatches,
  whole,
  docs: perDoc,
  batch,
  cold: { seconds: coldSeconds, mbps: bytes / 1e6 / coldSeconds, tokens: coldTokens, tok_s: coldTokens / coldSeconds, reps: coldReps },
  call_floor_us: floorUs,
}) + '\n');
