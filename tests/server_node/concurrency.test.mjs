// tests/server_node/concurrency.test.mjs — bounded load on loopback: 200 simultaneous streaming
// clients (official openai client) all complete, the server's RSS stays bounded, and 50 clients
// that disconnect mid-stream leave no KV blocks in use and no running sequences.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { startServer } from './harness.mjs';

let server, client;
before(async () => {
  server = await startServer(['--max-num-seqs', '256']);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => { if (server) await server.stop(); });

const rssKiB = () => Number(readFileSync(`/proc/${server.proc.pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);

async function metrics() {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^([a-z_]+) (\S+)$/);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

async function streamOne(i, abortAfter = 0) {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model: 'tiny', prompt: `Client ${i} says`, max_tokens: abortAfter ? 400 : 12, temperature: 0, stream: true },
    { signal: controller.signal });
  let chunks = 0, finish = null;
  try {
    for await (const c of stream) {
      chunks++;
      if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
      if (abortAfter && chunks === abortAfter) controller.abort();
    }
  } catch (e) {
    if (!abortAfter) throw e;
  }
  return { chunks, finish };
}

// Bounded RSS: the first wave's growth is the server's footprint at 200 streams (memory they touch
// for the first time — pools, allocator arenas, buffers; not broken down yet): ~243 MiB measured
// on the CI machine class, so close to the 256 MiB this test once allowed that it failed one run
// in a few. A second, identical wave must reuse it (measured +0.2-3.3 MiB). The second bound
// catches a per-request leak of ~160 KiB and up; the first a footprint that doubles.
test('200 simultaneous streaming clients complete with bounded RSS', async () => {
  await streamOne(-1);  // warm-up
  const wave = async () => {
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => streamOne(i)));
    for (const r of results) {
      assert.ok(r.chunks >= 1);
      assert.ok(['length', 'stop'].includes(r.finish));
    }
  };
  const rss0 = rssKiB();
  await wave();
  const rss1 = rssKiB();
  await wave();
  const rss2 = rssKiB();
  assert.ok(rss1 - rss0 < 512 * 1024, `RSS grew by ${rss1 - rss0} KiB in the first wave of 200 streams`);
  assert.ok(rss2 - rss1 < 32 * 1024, `RSS grew by ${rss2 - rss1} KiB in a second, identical wave`);
});

test('50 clients disconnecting mid-stream leave no KV in use', async () => {
  const before = (await metrics()).rill_requests_cancelled_total;
  await Promise.all(Array.from({ length: 50 }, (_, i) => streamOne(i, 2)));
  let m = null;
  for (let i = 0; i < 200; i++) {
    m = await metrics();
    if (m.rill_kv_cache_blocks_used === 0 && m.rill_num_requests_running === 0 && m.rill_num_requests_waiting === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(m.rill_kv_cache_blocks_used, 0);
  assert.equal(m.rill_num_requests_running, 0);
  assert.ok(m.rill_requests_cancelled_total - before >= 45, `cancelled ${m.rill_requests_cancelled_total - before} of 50`);
});
