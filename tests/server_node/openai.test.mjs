// tests/server_node/openai.test.mjs — the official `openai` npm client against a live rill serve:
// models, chat and completions (streaming and not), usage, n > 1, stop strings, logprobs (echo's prompt scores too), lists of prompts, error
// types (400/401/404/413/429/503), the API key, tokenize/detokenize, tools (the prompt is exactly the
// template's render), /metrics histograms, speculative decoding's identical text, and a graceful SIGTERM that answers new work with 503.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, templateTokens } from './harness.mjs';

let server, client;
before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { if (server) await server.stop(); });

const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];
const greedy = { model: 'tiny', temperature: 0, max_tokens: 24 };

async function post(path, body) {
  const r = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

test('health and models', async () => {
  const r = await fetch(`${server.url}/health`);
  assert.equal(r.status, 200);
  assert.match(server.logs(), /tool calls parsed as qwen3/, 'picked from the Qwen3 chat template');
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.deepEqual(models.map((m) => m.id), ['tiny']);
  assert.equal(models[0].object, 'model');
});

test('tokenize and detokenize round trip', async () => {
  const t = await post('/tokenize', { prompt: 'Hello world' });
  assert.equal(t.status, 200);
  assert.deepEqual(t.body.tokens, [9707, 1879]);  // Qwen3's ids for "Hello", " world"
  const d = await post('/detokenize', { tokens: t.body.tokens });
  assert.equal(d.body.prompt, 'Hello world');
});

test('chat non-streaming: message, usage counts the templated prompt', async () => {
  const r = await client.chat.completions.create({ ...greedy, messages });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  const t = await post('/tokenize', { messages });
  assert.equal(r.usage.prompt_tokens, t.body.count);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 24);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat streaming equals non-streaming (greedy), with include_usage', async () => {
  const full = await client.chat.completions.create({ ...greedy, messages });
  const stream = await client.chat.completions.create({ ...greedy, messages, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      text += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.ok(chunks > 2, 'streamed in several chunks');
  assert.deepEqual({ p: usage.prompt_tokens, c: usage.completion_tokens }, { p: full.usage.prompt_tokens, c: full.usage.completion_tokens });
});

test('completions streaming and not', async () => {
  const full = await client.completions.create({ ...greedy, prompt: 'Once upon a time' });
  assert.equal(full.object, 'text_completion');
  assert.equal(full.usage.prompt_tokens, 4);
  let text = '';
  for await (const c of await client.completions.create({ ...greedy, prompt: 'Once upon a time', stream: true })) text += c.choices[0]?.text ?? '';
  assert.equal(text, full.choices[0].text);
});

test('n > 1 gives n choices, seeded sampling is reproducible', async () => {
  const req = { model: 'tiny', messages, n: 3, max_tokens: 8, temperature: 1, seed: 1234 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.ok(a.usage.completion_tokens >= 3 && a.usage.completion_tokens <= 24, 'usage sums the choices');
});

test('stop strings end the text before the match (streaming and not)', async () => {
  const base = await client.completions.create({ ...greedy, max_tokens: 32, prompt: 'The weather today' });
  const text = base.choices[0].text;
  assert.ok(text.length >= 8, `need some output, got ${JSON.stringify(text)}`);
  const stop = text.slice(4, 6);
  const expected = text.slice(0, text.indexOf(stop));
  const r = await client.completions.create({ ...greedy, max_tokens: 32, prompt: 'The weather today', stop: [stop] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  let streamed = '';
  for await (const c of await client.completions.create({ ...greedy, max_tokens: 32, prompt: 'The weather today', stop, stream: true }))
    streamed += c.choices[0]?.text ?? '';
  assert.equal(streamed, expected);
});

test('logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 6, messages, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
    assert.equal(e.token, e.top_logprobs[0].token);  // greedy picks the most likely token
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-5);
  }
  const c = await client.completions.create({ ...greedy, max_tokens: 4, prompt: 'Hi', logprobs: 2 });
  assert.equal(c.choices[0].logprobs.tokens.length, 4);
  assert.equal(Object.keys(c.choices[0].logprobs.top_logprobs[0]).length, 2);
});

test('echo with logprobs scores the prompt, as evaluation harnesses ask for it', async () => {
  // lm-evaluation-harness's loglikelihood request: echo, logprobs 1, max_tokens 1.
  const prompt = 'The weather today is';
  const r = await client.completions.create({ model: 'tiny', temperature: 0, prompt, echo: true, logprobs: 1, max_tokens: 1 });
  const lp = r.choices[0].logprobs;
  const n = r.usage.prompt_tokens;
  assert.equal(lp.tokens.length, n + 1);
  assert.equal(lp.tokens.slice(0, n).join(''), prompt);
  assert.equal(r.choices[0].text.slice(0, prompt.length), prompt);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.deepEqual(lp.text_offset.slice(0, 2), [0, lp.tokens[0].length]);
  for (let i = 1; i <= n; ++i) {
    assert.ok(lp.token_logprobs[i] < 0, `token ${i}: ${lp.token_logprobs[i]}`);
    const top = Object.values(lp.top_logprobs[i]);
    assert.equal(top.length, 1);
    assert.ok(top[0] >= lp.token_logprobs[i] - 1e-6, `token ${i}: the best alternative is at least as likely`);
  }
  // The last prompt token's score equals the generated token's logprob of a run on the prompt before it.
  const ids = (await post('/tokenize', { prompt })).body.tokens;
  assert.equal(ids.length, n);
  const head = await client.completions.create({ model: 'tiny', temperature: 0, prompt: ids.slice(0, n - 1), max_tokens: 1, logprobs: 1 });
  const [[best, bestLogprob]] = Object.entries(head.choices[0].logprobs.top_logprobs[0]);
  assert.deepEqual(Object.keys(lp.top_logprobs[n - 1]), [best]);
  assert.ok(Math.abs(lp.top_logprobs[n - 1][best] - bestLogprob) < 1e-4, `${lp.top_logprobs[n - 1][best]} vs ${bestLogprob}`);
  // max_tokens 0: the prompt and the same scores alone; streamed, the echoed chunk carries them.
  const zero = await client.completions.create({ model: 'tiny', prompt, echo: true, logprobs: 1, max_tokens: 0 });
  assert.equal(zero.choices[0].text, prompt);
  assert.deepEqual(zero.choices[0].logprobs.token_logprobs, lp.token_logprobs.slice(0, n));
  assert.equal(zero.usage.completion_tokens, 0);
  const chunks = [];
  for await (const c of await client.completions.create({ model: 'tiny', prompt, echo: true, logprobs: 1, max_tokens: 0, stream: true })) chunks.push(c);
  assert.equal(chunks[0].choices[0].text, prompt);
  assert.deepEqual(chunks[0].choices[0].logprobs.token_logprobs, lp.token_logprobs.slice(0, n));
});

test('a list of prompts gives each its choices, equal to the prompts sent alone', async () => {
  const prompts = ['Once upon a time', 'The weather today is'];
  const both = await client.completions.create({ ...greedy, max_tokens: 8, prompt: prompts, n: 2 });
  assert.deepEqual(both.choices.map((c) => c.index), [0, 1, 2, 3]);
  let promptTokens = 0;
  for (const [k, prompt] of prompts.entries()) {
    const alone = await client.completions.create({ ...greedy, max_tokens: 8, prompt });
    assert.equal(both.choices[2 * k].text, alone.choices[0].text, `prompt ${k}`);
    assert.equal(both.choices[2 * k + 1].text, alone.choices[0].text, `prompt ${k}, second sequence (greedy)`);
    promptTokens += alone.usage.prompt_tokens;
  }
  assert.equal(both.usage.prompt_tokens, promptTokens);
  // Scoring several texts in one request (echo, logprobs, max_tokens 0), as harnesses batch them.
  const scored = await client.completions.create({ model: 'tiny', prompt: prompts, echo: true, logprobs: 0, max_tokens: 0 });
  const one = await client.completions.create({ model: 'tiny', prompt: prompts[1], echo: true, logprobs: 0, max_tokens: 0 });
  assert.deepEqual(scored.choices[1].logprobs.token_logprobs, one.choices[0].logprobs.token_logprobs);
  assert.equal(scored.choices[0].text, prompts[0]);
});

test('tools: definitions, an assistant tool call and its result are accepted and reach the prompt', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const conversation = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
  ];
  const plain = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages: conversation.slice(0, 1) });
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages: conversation, tools, tool_choice: 'auto' });
  assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 50, 'the tool schema and the call are in the prompt');
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  // Exactly the template's render of the conversation as transformers takes it (arguments as an object).
  const asTemplate = conversation.map((m) => (m.tool_calls ? { ...m, content: '', tool_calls: m.tool_calls.map((c) =>
    ({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) } : m));
  assert.equal(r.usage.prompt_tokens, await templateTokens(server.url, asTemplate, tools));
  const streamed = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages: conversation, tools, stream: true,
    stream_options: { include_usage: true } });
  let usage = null;
  for await (const c of streamed) usage = c.usage ?? usage;
  assert.equal(usage.prompt_tokens, r.usage.prompt_tokens);
  // Forcing a call ends the prompt with the call's opening (the model continues it).
  const required = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages, tools, tool_choice: 'required' });
  const named = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages, tools,
    tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  const auto = await client.chat.completions.create({ ...greedy, max_tokens: 4, messages, tools });
  assert.ok(auto.usage.prompt_tokens < required.usage.prompt_tokens && required.usage.prompt_tokens < named.usage.prompt_tokens);
  await assert.rejects(client.chat.completions.create({ ...greedy, messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
  await assert.rejects(client.chat.completions.create({ ...greedy, messages, tool_choice: 'required' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
});

test('bad requests raise the typed SDK errors naming the field', async () => {
  await assert.rejects(client.chat.completions.create({ ...greedy, messages, temperature: 5 }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.status, 400);
    assert.equal(e.param, 'temperature');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ ...greedy, messages: [{ role: 'wizard', content: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].role');
  await assert.rejects(client.chat.completions.create({ ...greedy, model: 'gpt-9', messages }), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.chat.completions.create({ ...greedy, messages, max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_completion_tokens');
  const r = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', body: '{not json' });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.type, 'invalid_request_error');
  const missing = await fetch(`${server.url}/v1/nothing`);
  assert.equal(missing.status, 404);
});

test('a client abort mid-stream cancels the request, frees its KV, and the server keeps serving', async () => {
  const cancelledBefore = (await metrics()).rill_requests_cancelled_total;
  const controller = new AbortController();
  const stream = await client.chat.completions.create({ ...greedy, max_tokens: 450, messages, stream: true }, { signal: controller.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) controller.abort();
  } catch (e) {
    assert.equal(e.name, 'APIUserAbortError');
  }
  assert.ok(n >= 3 && n < 50, `stopped early (${n} chunks)`);
  // The disconnect cancels the request and frees its KV (checked through /metrics).
  let m = null;
  for (let i = 0; i < 100; i++) {
    m = await metrics();
    if (m.rill_requests_cancelled_total > cancelledBefore && m.rill_kv_cache_blocks_used === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(m.rill_requests_cancelled_total, cancelledBefore + 1, 'the disconnect cancelled the request');
  assert.equal(m.rill_kv_cache_blocks_used, 0);
  assert.equal(m.rill_num_requests_running, 0);
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 2, messages });
  assert.equal(r.choices.length, 1);
});

async function metrics(url = server.url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^([a-z_]+(?:\{[^}]*\})?) (\S+)$/);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

test('/metrics: Prometheus text with request counts, tokens and the TTFT histogram', async () => {
  const r = await fetch(`${server.url}/metrics`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/plain/);
  const m = await metrics();
  assert.ok(m['rill_requests_total{endpoint="/v1/chat/completions",status="200"}'] >= 5);
  assert.ok(m['rill_requests_total{endpoint="/v1/chat/completions",status="400"}'] >= 3);
  assert.ok(m['rill_requests_total{endpoint="other",status="404"}'] >= 1);
  assert.ok(m.rill_generation_tokens_total > 0 && m.rill_prompt_tokens_total > 0);
  assert.ok(m.rill_time_to_first_token_seconds_count >= 5);
  assert.equal(m['rill_time_to_first_token_seconds_bucket{le="+Inf"}'], m.rill_time_to_first_token_seconds_count);
  assert.ok('rill_engine_inter_token_latency_seconds_count' in m && 'rill_kv_cache_usage_ratio' in m && 'rill_num_requests_waiting' in m);
  const text = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(text, /# TYPE rill_inter_token_latency_seconds histogram\n/);
  // The ITL histogram counts every generated token after a sequence's first.
  const r6 = await client.chat.completions.create({ ...greedy, max_tokens: 6, messages, ignore_eos: true });
  assert.equal(r6.usage.completion_tokens, 6);
  const after = await metrics();
  assert.equal(after.rill_inter_token_latency_seconds_count - m.rill_inter_token_latency_seconds_count, 5);
  assert.equal(after['rill_inter_token_latency_seconds_bucket{le="+Inf"}'], after.rill_inter_token_latency_seconds_count);
  assert.ok(after.rill_inter_token_latency_seconds_sum > m.rill_inter_token_latency_seconds_sum);
});

test('--speculative-tokens: the same text as without drafts (greedy, seeded, penalised), streamed and not', async () => {
  const spec = await startServer(['--speculative-tokens', '4', '--speculative-ngram-min', '1']);
  try {
    assert.match(spec.logs(), /speculative decoding: up to 4 drafted tokens a row/);
    const specClient = new OpenAI({ baseURL: `${spec.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const prompt = 'one two three four, one two three four, one two three four, one two';
    for (const extra of [{}, { temperature: 0.8, seed: 7, top_p: 0.9 }, { frequency_penalty: 0.5 }]) {
      const req = { ...greedy, max_tokens: 48, prompt, ...extra };
      const want = await client.completions.create(req);
      const got = await specClient.completions.create(req);
      assert.equal(got.choices[0].text, want.choices[0].text, JSON.stringify(extra));
      assert.equal(got.usage.completion_tokens, want.usage.completion_tokens);
      let text = '';
      for await (const c of await specClient.completions.create({ ...req, stream: true })) text += c.choices[0]?.text ?? '';
      assert.equal(text, want.choices[0].text, `streamed, ${JSON.stringify(extra)}`);
    }
    const m = await metrics(spec.url);
    assert.ok(m.rill_spec_draft_tokens_total > 0, 'drafts were verified');
    assert.ok(m.rill_spec_accepted_tokens_total <= m.rill_spec_draft_tokens_total);
  } finally {
    await spec.stop();
  }
});

test('--reasoning-parser: output before </think> is reasoning_content (the tiny model never closes it)', async () => {
  const plain = await client.chat.completions.create({ ...greedy, messages });
  const thinking = await startServer(['--reasoning-parser', 'qwen3']);
  try {
    const c = new OpenAI({ baseURL: `${thinking.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const r = await c.chat.completions.create({ ...greedy, messages });
    assert.equal(r.choices[0].message.reasoning_content, plain.choices[0].message.content);
    assert.equal(r.choices[0].message.content, '');
    let reasoning = '', content = '';
    for await (const ch of await c.chat.completions.create({ ...greedy, messages, stream: true })) {
      reasoning += ch.choices[0]?.delta?.reasoning_content ?? '';
      content += ch.choices[0]?.delta?.content ?? '';
    }
    assert.equal(reasoning, plain.choices[0].message.content);
    assert.equal(content, '');
    const off = await c.chat.completions.create({ ...greedy, messages, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(off.choices[0].message.reasoning_content, undefined);
  } finally {
    await thinking.stop();
  }
});

test('API key: 401 without it, served with it; oversize body is 413', async () => {
  const keyed = await startServer(['--api-key', 'sekrit', '--max-body-bytes', '4096']);
  try {
    const bad = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    const good = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: 'sekrit', maxRetries: 0 });
    const r = await good.completions.create({ ...greedy, max_tokens: 2, prompt: 'Hi' });
    assert.equal(r.choices.length, 1);
    await assert.rejects(good.completions.create({ ...greedy, prompt: 'x'.repeat(10000) }), (e) => e.status === 413);
  } finally {
    const { code } = await keyed.stop();
    assert.equal(code, 0, 'SIGTERM exits 0');
  }
});

test('SIGTERM: running streams finish, new work gets 503 (OpenAI error; Anthropic overloaded_error)', async () => {
  const s = await startServer();
  const oa = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const an = new Anthropic({ baseURL: s.url, apiKey: 'unused', maxRetries: 0 });
  const stream = await oa.chat.completions.create({ ...greedy, messages, max_tokens: 460, ignore_eos: true, stream: true });
  const it = stream[Symbol.asyncIterator]();
  await it.next();  // the stream is running
  s.proc.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 100));
  const health = await fetch(`${s.url}/health`);
  assert.equal(health.status, 503);
  assert.equal((await health.json()).status, 'draining');
  await assert.rejects(oa.chat.completions.create({ ...greedy, messages }), (e) => {
    assert.ok(e instanceof OpenAI.InternalServerError, String(e));
    assert.equal(e.status, 503);
    assert.equal(e.error.type, 'service_unavailable');
    return true;
  });
  await assert.rejects(an.messages.create({ model: 'tiny', max_tokens: 4, messages }), (e) => {
    assert.ok(e instanceof Anthropic.InternalServerError, String(e));
    assert.equal(e.status, 503);
    assert.equal(e.error.error.type, 'overloaded_error');
    return true;
  });
  let finish = null;
  for (let r = await it.next(); !r.done; r = await it.next()) {
    finish = r.value.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'length', 'the running stream completed');
  const { code } = await s.stop();
  assert.equal(code, 0);
});

test('a full queue is 429 (RateLimitError) while admitted requests complete; --tool-parser overrides the template', async () => {
  const s = await startServer(['--max-num-seqs', '1', '--max-waiting', '1', '--tool-parser', 'llama3']);
  try {
    assert.match(s.logs(), /tool calls parsed as llama3/);
    const oa = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
      oa.chat.completions.create({ ...greedy, messages, max_tokens: 64, ignore_eos: true })));
    const ok = results.filter((r) => r.status === 'fulfilled');
    const limited = results.filter((r) => r.status === 'rejected');
    assert.ok(ok.length >= 1 && limited.length >= 1, `${ok.length} served, ${limited.length} refused`);
    for (const r of limited) {
      assert.ok(r.reason instanceof OpenAI.RateLimitError, String(r.reason));
      assert.equal(r.reason.error.type, 'rate_limit_error');
    }
    for (const r of ok) assert.equal(r.value.usage.completion_tokens, 64);
  } finally {
    await s.stop();
  }
});
