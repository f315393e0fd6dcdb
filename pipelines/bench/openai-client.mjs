// openai-client.mjs: what a user of the official OpenAI Node SDK would
// write to answer a file of prompt records: N concurrent workers, each
// sending one chat completion at a time, every answer written as a line.
// pipelines/bench.sh runs it against the same llmsim endpoint as infer.
//
//   node openai-client.mjs --modules DIR --base-url http://127.0.0.1:30000/v1 \
//       --concurrency 64 --max-tokens 16 prompts.jsonl > answers.jsonl
//
// DIR holds node_modules/openai (npm install --prefix DIR, from the
// package.json beside this file). Exits 1 if any request failed.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: opts, positionals } = parseArgs({
  options: {
    modules: { type: 'string' },
    'base-url': { type: 'string' },
    model: { type: 'string', default: 'Qwen3.6-27B' },
    concurrency: { type: 'string', default: '64' },
    'max-tokens': { type: 'string', default: '16' },
  },
  allowPositionals: true,
});
if (!opts.modules || !opts['base-url'] || positionals.length !== 1) {
  console.error('usage: node openai-client.mjs --modules DIR --base-url URL [--concurrency N] [--max-tokens N] PROMPTS.jsonl');
  process.exit(2);
}
const require = createRequire(join(opts.modules, 'package.json'));
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: opts['base-url'], apiKey: 'none' });

const lines = readFileSync(positionals[0], 'utf8').split('\n').filter((l) => l.trim() !== '');
const maxTokens = Number(opts['max-tokens']);
let next = 0;
let failed = 0;
const out = [];
const flush = () => {
  if (out.length) process.stdout.write(out.join(''));
  out.length = 0;
};

async function worker() {
  while (next < lines.length) {
    const rec = JSON.parse(lines[next++]);
    try {
      const r = await client.chat.completions.create({ model: opts.model, messages: rec.messages, max_tokens: maxTokens });
      const c = r.choices[0];
      out.push(JSON.stringify({ id: rec.id, output: { text: c.message.content, finish_reason: c.finish_reason, usage: r.usage } }) + '\n');
      if (out.length >= 256) flush();
    } catch (e) {
      failed++;
      console.error(`openai-client: ${rec.id}: ${e.message}`);
    }
  }
}

await Promise.all(Array.from({ length: Number(opts.concurrency) }, worker));
flush();
if (failed) {
  console.error(`openai-client: ${failed} of ${lines.length} requests failed`);
  process.exitCode = 1;
}
