// tests/server_node/anthropic.test.mjs — the official `@anthropic-ai/sdk` client against a live
// rill serve: messages (streaming and not, the exact event order), system prompts, stop
// sequences, count_tokens and typed errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer } from './harness.mjs';

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
