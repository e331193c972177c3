// tests/server_node/responses.test.mjs — the official `openai` client's Responses API against a
// live rill serve: a response with output_text and usage, the streaming event sequence with the
// same text, input items with a function call and its output, and typed errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './harness.mjs';

let server, client;
before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { if (server) await server.stop(); });

const base = { model: 'tiny', instructions: 'Be brief.', input: 'Tell me about owls.', max_output_tokens: 16, temperature: 0 };

test('response: output_text, usage, status', async () => {
  const r = await client.responses.create(base);
  assert.equal(r.object, 'response');
  assert.ok(['completed', 'incomplete'].includes(r.status));
  assert.equal(r.output[0].type, 'message');
  assert.equal(typeof r.output_text, 'string');
  assert.equal(r.output_text, r.output[0].content[0].text);
  assert.ok(r.usage.output_tokens >= 1 && r.usage.output_tokens <= 16);
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
});

test('streaming: event sequence and the same text', async () => {
  const full = await client.responses.create(base);
  const types = [];
  let text = '', done = null;
  for await (const e of await client.responses.create({ ...base, stream: true })) {
    types.push(e.type);
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.completed' || e.type === 'response.incomplete') done = e.response;
  }
  assert.equal(text, full.output_text);
  assert.equal(done.output[0].content[0].text, full.output_text);
  const collapsed = types.filter((t, i) => t !== types[i - 1]);
  assert.deepEqual(collapsed.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.deepEqual(collapsed.slice(-4, -1), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done']);
  assert.equal(collapsed.at(-1), full.status === 'completed' ? 'response.completed' : 'response.incomplete');
});

test('input items with a function call and its output, function tools', async () => {
  const plain = await client.responses.create({ ...base, max_output_tokens: 2, input: 'Weather in Oslo?' });
  const r = await client.responses.create({
    ...base, max_output_tokens: 2,
    tools: [{ type: 'function', name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }],
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'Weather in Oslo?' }] },
      { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      { type: 'function_call_output', call_id: 'c1', output: '{"temp_c": 3}' },
    ],
  });
  assert.ok(r.usage.input_tokens > plain.usage.input_tokens + 50, 'tools, the call and its output reach the prompt');
});

test('errors name the Responses field', async () => {
  await assert.rejects(client.responses.create({ ...base, max_output_tokens: 10 ** 6 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_output_tokens');
  await assert.rejects(client.responses.create({ ...base, input: [{ type: 'reasoning' }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[0].type');
});
