// tests/server_node/anthropic.test.mjs — the official `@anthropic-ai/sdk` client against a live
// rill serve: messages (streaming and not, the exact event order), system prompts, stop
// sequences, count_tokens, tools (tool_use/tool_result history whose prompt is exactly the chat
// template's render, tool_choice), thinking.budget_tokens cutting a long thought, and typed errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, templateTokens } from './harness.mjs';

let server, client;
before(async () => {
  server = await startServer(['--api-key', 'k-test']);
  client = new Anthropic({ baseURL: server.url, apiKey: 'k-test', maxRetries: 0 });
});
after(async () => { if (server) await server.stop(); });

const base = { model: 'tiny', max_tokens: 20, temperature: 0, system: 'Be brief.', messages: [{ role: 'user', content: 'Tell me about cats.' }] };

async function tokenize(messages) {
  const r = await fetch(`${server.url}/tokenize`, { method: 'POST', headers: { 'x-api-key': 'k-test' }, body: JSON.stringify({ messages }) });
  return (await r.json()).count;
}

test('messages non-streaming', async () => {
  const m = await client.messages.create(base);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.content.length, 1);
  assert.equal(m.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.equal(m.usage.input_tokens, await tokenize([{ role: 'system', content: 'Be brief.' }, ...base.messages]));
  assert.ok(m.usage.output_tokens >= 1 && m.usage.output_tokens <= 20);
});

test('messages streaming: event grammar and the same text as non-streaming', async () => {
  const full = await client.messages.create(base);
  const events = [];
  let text = '';
  for await (const e of await client.messages.create({ ...base, stream: true })) {
    events.push(e.type);
    if (e.type === 'content_block_delta') text += e.delta.text;
    if (e.type === 'message_delta') {
      assert.equal(e.delta.stop_reason, full.stop_reason);
      assert.equal(e.usage.output_tokens, full.usage.output_tokens);
    }
  }
  assert.equal(text, full.content[0].text);
  // (the SDK consumes the ping event itself)
  const collapsed = events.filter((t, i) => t !== events[i - 1]);
  assert.deepEqual(collapsed, ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  // The SDK's stream helper assembles the same final message.
  const final = await client.messages.stream(base).finalMessage();
  assert.equal(final.content[0].text, full.content[0].text);
});

test('stop_sequences end the text before the match', async () => {
  const full = await client.messages.create({ ...base, max_tokens: 32 });
  const text = full.content[0].text;
  assert.ok(text.length >= 8, `need some output, got ${JSON.stringify(text)}`);
  const stop = text.slice(4, 6);
  const m = await client.messages.create({ ...base, max_tokens: 32, stop_sequences: [stop] });
  assert.equal(m.content[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
});

test('count_tokens', async () => {
  const r = await client.messages.countTokens({ model: 'tiny', messages: base.messages, system: base.system });
  assert.equal(r.input_tokens, await tokenize([{ role: 'system', content: 'Be brief.' }, ...base.messages]));
});

test('typed errors', async () => {
  await assert.rejects(client.messages.create({ ...base, messages: [{ role: 'system', content: 'x' }] }), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.match(e.error.error.message, /messages\.0\.role/);
    return true;
  });
  await assert.rejects(client.messages.create({ ...base, temperature: 1.5 }), (e) => e instanceof Anthropic.BadRequestError && /temperature/.test(e.message));
  await assert.rejects(client.messages.create({ ...base, model: 'claude-x' }), (e) => e instanceof Anthropic.NotFoundError);
  const bad = new Anthropic({ baseURL: server.url, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(bad.messages.create(base), (e) => e instanceof Anthropic.AuthenticationError && e.error.error.type === 'authentication_error');
});

const tools = [{ name: 'get_weather', description: 'Weather for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const history = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: [{ type: 'text', text: 'Checking.' },
    { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: '{"temp_c": 21}' }] },
];

test('tools: tool_use and tool_result history; the prompt is the template render of the same conversation', async () => {
  const m = await client.messages.create({ ...base, max_tokens: 4, messages: history, tools, tool_choice: { type: 'auto' } });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason));
  assert.ok(m.content.length >= 1);
  // The same conversation in the form chat templates take (OpenAI tool_calls and role "tool").
  const asTemplate = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: 'Checking.', tool_calls: [{ id: 'toolu_01', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
    { role: 'tool', tool_call_id: 'toolu_01', content: '{"temp_c": 21}' },
  ];
  const fnTools = tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } }));
  const expected = await templateTokens(server.url, asTemplate, fnTools, { 'x-api-key': 'k-test' });
  assert.equal(m.usage.input_tokens, expected);
  const counted = await client.messages.countTokens({ model: 'tiny', system: base.system, messages: history, tools });
  assert.equal(counted.input_tokens, expected);
  // Streaming with tools: the SDK assembles a valid message from the events.
  const final = await client.messages.stream({ ...base, max_tokens: 4, messages: history, tools }).finalMessage();
  assert.equal(final.usage.output_tokens, m.usage.output_tokens);
  assert.deepEqual(final.content, m.content);
  // tool_choice none: the tools are left out of the prompt.
  const none = await client.messages.countTokens({ model: 'tiny', system: base.system, messages: history, tools, tool_choice: { type: 'none' } });
  assert.ok(none.input_tokens < expected - 50);
});

test('tools: a forced tool call (tool_choice tool) opens the call in the prompt; bad tools are typed 400s', async () => {
  const choice = { type: 'tool', name: 'get_weather' };
  const auto = await client.messages.countTokens({ model: 'tiny', system: base.system, messages: base.messages, tools });
  const forced = await client.messages.countTokens({ model: 'tiny', system: base.system, messages: base.messages, tools, tool_choice: choice });
  assert.ok(forced.input_tokens > auto.input_tokens, 'the opening of the call follows the generation prompt');
  const m = await client.messages.create({ ...base, max_tokens: 8, tools, tool_choice: choice });
  assert.equal(m.usage.input_tokens, forced.input_tokens);
  await assert.rejects(client.messages.create({ ...base, tools, tool_choice: { type: 'tool', name: 'nope' } }),
    (e) => e instanceof Anthropic.BadRequestError && /tool_choice\.name/.test(e.message));
  await assert.rejects(client.messages.create({ ...base, tools: [{ name: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && /tools\.0\.input_schema/.test(e.message));
  await assert.rejects(client.messages.create({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_use', id: 'a', name: 'x', input: {} }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /messages\.0\.content\[0\]\.type/.test(e.message));
});

test('an oversize body is 413 with an Anthropic error body', async () => {
  const s = await startServer(['--max-body-bytes', '4096']);
  try {
    const c = new Anthropic({ baseURL: s.url, apiKey: 'unused', maxRetries: 0 });
    await assert.rejects(c.messages.create({ ...base, messages: [{ role: 'user', content: 'x'.repeat(10000) }] }), (e) => {
      assert.ok(e instanceof Anthropic.APIError, String(e));
      assert.equal(e.status, 413);
      assert.equal(e.error.error.type, 'request_too_large');
      return true;
    });
  } finally {
    await s.stop();
  }
});

test('thinking.budget_tokens cuts a thought that runs past it; the answer follows in a text block', async () => {
  const s = await startServer(['--reasoning-parser', 'qwen3', '--max-model-len', '2048']);
  try {
    const c = new Anthropic({ baseURL: s.url, apiKey: 'unused', maxRetries: 0 });
    // The random model never closes its thought: cut at 1,024 tokens, then the answer runs to max_tokens.
    const req = { ...base, max_tokens: 1100, thinking: { type: 'enabled', budget_tokens: 1024 } };
    const m = await c.messages.create(req);
    assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
    assert.ok(m.content[0].thinking.length > 0);
    assert.ok(m.content[1].text.length > 0);
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.usage.output_tokens, 1100);
    assert.match(s.logs(), /thinking budget/, 'the cut is logged');
    const events = [];
    for await (const e of await c.messages.create({ ...req, stream: true })) events.push(e);
    const starts = events.filter((e) => e.type === 'content_block_start').map((e) => e.content_block.type);
    assert.deepEqual(starts, ['thinking', 'text']);
    const text = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'text_delta').map((e) => e.delta.text).join('');
    assert.equal(text, m.content[1].text, 'greedy: the streamed answer is the same');
  } finally {
    await s.stop();
  }
});
